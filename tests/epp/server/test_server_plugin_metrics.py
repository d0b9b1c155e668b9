"""Plugin-owned families through the picker's observer: decision counters and in-flight gauges, with
upstream's names and labels under each ``--metrics-naming`` scheme, fed by a real scheduler."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import epp.server.metrics as metrics_module
from epp.server.metric_catalog import Naming
from epp.server.metrics import SchedulerMetrics
from scheduler.config import load_config_text
from scheduler.observer import InflightSample
from scheduler.plugins.filters.roles import ROLE_LABEL
from scheduler.types import ApiKind, Completion, Endpoint, LLMRequest, Outcome

HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
CONFIG = """
plugins:
- {name: load, type: inflight-load-producer}
- {type: prefill-filter}
- {type: decode-filter}
- {type: always-disagg-multimodal-decider}
- name: dh
  type: disagg-profile-handler
  parameters: {deciders: {prefill: always-disagg-multimodal-decider}}
- {type: max-score-picker}
schedulingProfiles:
- {name: decode, plugins: [{pluginRef: decode-filter}, {pluginRef: max-score-picker}]}
- {name: prefill, plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]}
"""
PD_CONFIG = CONFIG.replace(
    "- name: dh\n  type: disagg-profile-handler\n  parameters: {deciders: {prefill:",
    "- name: pdh\n  type: pd-profile-handler\n  parameters: {deciderPluginName:",
).replace("always-disagg-multimodal-decider}}\n", "always-disagg-multimodal-decider}\n")
D = Endpoint("10.0.0.1:8000", "pod-1", {ROLE_LABEL: "decode"})
P = Endpoint("10.0.0.2:8000", "pod-2", {ROLE_LABEL: "prefill"})


def text(rid: str, model: str = "tm", **kw: object) -> LLMRequest:
    return LLMRequest(rid, "m", model, prompt_text="x" * 400, **kw)  # type: ignore[arg-type]


def image(rid: str) -> LLMRequest:
    content = [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]
    return LLMRequest(
        rid, "m", "tm", messages=({"role": "user", "content": content},), api=ApiKind.CHAT_COMPLETIONS
    )


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_disagg_decisions_are_counted_under_both_names() -> None:
    registry = CollectorRegistry()
    scheduler = load_config_text(HEAD + CONFIG).build_scheduler(observer=SchedulerMetrics(registry))
    for i in range(3):
        scheduler.schedule(text(f"t{i}"), [D, P])
    scheduler.schedule(image("i"), [D, P])
    scheduler.schedule(text("u", model=""), [D, P])
    llmd = {"plugin_name": "dh", "plugin_type": "disagg-profile-handler"}
    name = "llm_d_epp_disagg_decision_total"
    assert value(registry, name, **llmd, model_name="tm", decision_type="decode-only") == 3
    assert value(registry, name, **llmd, model_name="tm", decision_type="prefill-decode") == 1
    assert value(registry, name, **llmd, model_name="unknown", decision_type="decode-only") == 1
    old = "llm_d_inference_scheduler_disagg_decision_total"
    assert value(registry, old, model_name="tm", decision_type="decode-only") == 3
    assert value(registry, old, model_name="tm", decision_type="prefill-decode") == 1
    assert (
        value(registry, "llm_d_epp_pd_decision_total", **llmd, model_name="tm", decision_type="decode-only")
        is None
    )


@pytest.mark.parametrize("naming", list(Naming))
def test_pd_decisions_follow_the_naming_scheme(naming: Naming) -> None:
    registry = CollectorRegistry()
    observer = SchedulerMetrics(registry, naming=naming)
    scheduler = load_config_text(HEAD + PD_CONFIG).build_scheduler(observer=observer)
    scheduler.schedule(image("a"), [D, P])
    scheduler.schedule(text("b"), [D, P])
    scheduler.schedule(text("c"), [D, P])
    llmd = {"plugin_name": "pdh", "plugin_type": "pd-profile-handler", "model_name": "tm"}
    new, old = "llm_d_epp_pd_decision_total", "llm_d_inference_scheduler_pd_decision_total"
    exports_new, exports_old = naming is not Naming.INFERENCE, naming is not Naming.LLM_D
    assert value(registry, new, **llmd, decision_type="decode-only") == (2 if exports_new else None)
    assert value(registry, new, **llmd, decision_type="prefill-decode") == (1 if exports_new else None)
    assert value(registry, old, model_name="tm", decision_type="decode-only") == (2 if exports_old else None)
    assert value(registry, old, model_name="tm", decision_type="prefill-decode") == (
        1 if exports_old else None
    )


def test_inflight_gauges_are_read_at_scrape_time_and_stay_at_zero() -> None:
    registry = CollectorRegistry()
    observer = SchedulerMetrics(registry, namespace="ns1")
    scheduler = load_config_text(HEAD + CONFIG).build_scheduler(observer=observer)
    a, b = text("a", stream=True), text("b", fairness_id="tenant", priority=-1)
    ra, rb = scheduler.schedule(a, [D, P]), scheduler.schedule(b, [D, P])
    scheduler.dispatched(a, ra)
    scheduler.dispatched(b, rb)

    def gauges(endpoint: str, fairness: str, priority: str) -> tuple[float | None, float | None]:
        labels = {"endpoint_name": endpoint, "namespace": "ns1", "producer_name": "load",
                  "fairness_id": fairness, "priority": priority}  # fmt: skip
        return (
            value(registry, "llm_d_epp_inflight_requests", **labels),
            value(registry, "llm_d_epp_inflight_tokens", **labels),
        )

    assert gauges("pod-1", "default-flow", "0") == (1, 100)
    assert gauges("pod-1", "tenant", "-1") == (1, 100)
    assert gauges("pod-2", "tenant", "-1") == (None, None)  # text requests are decode-only here
    scheduler.response_chunk(a, ra, b"data: {}\n\n")
    assert gauges("pod-1", "default-flow", "0") == (1, 0)
    scheduler.completed(a, ra, Completion(Outcome.OK))
    scheduler.completed(b, rb, Completion(Outcome.OK))
    assert gauges("pod-1", "default-flow", "0") == (0, 0)
    assert gauges("pod-1", "tenant", "-1") == (0, 0)
    text_out = generate_latest(registry).decode()
    assert "# TYPE llm_d_epp_inflight_requests gauge" in text_out


def test_inflight_series_remembered_at_zero_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "INFLIGHT_SERIES_BUDGET", 2)

    class Source:
        name = "load"

        def __init__(self) -> None:
            self.now: list[InflightSample] = []

        def inflight_samples(self) -> list[InflightSample]:
            return self.now

    registry = CollectorRegistry()
    observer = SchedulerMetrics(registry, naming=Naming.LLM_D)
    source = Source()
    observer.watch_inflight_load(source)

    def series() -> dict[str, float]:
        family = next(f for f in registry.collect() if f.name == "llm_d_epp_inflight_requests")
        return {s.labels["endpoint_name"]: s.value for s in family.samples}

    for name in ("a", "b", "c"):
        source.now = [InflightSample(name, "f", 0, 1, 10)]
        series()
    source.now = [InflightSample("d", "f", 0, 2, 10), InflightSample("e", "f", 0, 1, 10),
                  InflightSample("g", "f", 0, 1, 10)]  # fmt: skip
    assert series() == {"d": 2, "e": 1, "g": 1}  # live series are never dropped
    source.now = []
    assert series() == {"e": 0, "g": 0}  # the two most recently live, at 0


def test_no_inflight_gauges_under_the_inference_names() -> None:
    registry = CollectorRegistry()
    observer = SchedulerMetrics(registry, naming=Naming.INFERENCE)
    scheduler = load_config_text(HEAD + CONFIG).build_scheduler(observer=observer)
    request = text("a")
    scheduler.dispatched(request, scheduler.schedule(request, [D, P]))
    assert "inflight_requests" not in generate_latest(registry).decode()
    assert "inflight_tokens" not in generate_latest(registry).decode()


def test_plugin_durations_are_recorded_per_call_and_appear_at_the_first_call() -> None:
    """The scheduler times each plugin with the observer's own recording function: every call counts,
    under both names, and a hook that never ran has no series."""
    registry = CollectorRegistry()
    scheduler = load_config_text(HEAD + CONFIG).build_scheduler(observer=SchedulerMetrics(registry))
    for i in range(3):
        scheduler.schedule(text(f"t{i}"), [D, P])
    picker = {"extension_point": "pick", "plugin_type": "max-score-picker", "plugin_name": "max-score-picker"}
    handler = {
        "extension_point": "process_results",
        "plugin_type": "disagg-profile-handler",
        "plugin_name": "dh",
    }
    removed = {
        "extension_point": "endpoints_removed",
        "plugin_type": "inflight-load-producer",
        "plugin_name": "load",
    }
    for name in (
        "llm_d_epp_plugin_duration_seconds_count",
        "inference_extension_plugin_duration_seconds_count",
    ):
        assert value(registry, name, **picker) == 3
        assert value(registry, name, **handler) == 3
        assert value(registry, name, **removed) is None
    assert 'extension_point="endpoints_removed"' not in generate_latest(registry).decode()
    scheduler.endpoints_removed(frozenset({D.address}))
    assert value(registry, "llm_d_epp_plugin_duration_seconds_count", **removed) == 1
