"""Plugin-owned metrics through the scheduler: disaggregation decisions and in-flight load samples.

The decision cases follow llm-d-router's handlers (``disagg_profile_handler.go`` records
``DisaggDecisionType(encodeUsed, prefillUsed)`` once the stages are done, nothing when decode failed;
``pd_profile_handler.go`` records ``prefill-decode`` when its decider says so, before prefill runs, and
``decode-only`` otherwise). The in-flight samples are those of ``inflightload/producer.go``: one
series per (endpoint, fairness id, priority), charged at PreRequest, released at the end.
"""

from __future__ import annotations

from typing import Any

import pytest
from sched_fakes import RecordingObserver

from scheduler.config import load_config_text
from scheduler.errors import NoEndpointError
from scheduler.observer import NO_PLUGIN_METRICS, InflightLoadSource, InflightSample, PluginMetrics
from scheduler.plugins.filters.roles import ROLE_LABEL
from scheduler.plugins.handlers.disagg import decision_type
from scheduler.scheduler import Scheduler
from scheduler.types import ApiKind, Completion, Endpoint, LLMRequest, Outcome

HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"


class RecordingMetrics(RecordingObserver):
    """A scheduler observer that also takes the plugin-owned families."""

    def __init__(self) -> None:
        super().__init__()
        self.decisions: list[tuple[str, str, str, str, str]] = []
        self.sources: list[InflightLoadSource] = []

    def pd_decision(self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str) -> None:
        self.decisions.append(("pd", plugin_type, plugin_name, model_name, decision_type))

    def disagg_decision(
        self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str
    ) -> None:
        self.decisions.append(("disagg", plugin_type, plugin_name, model_name, decision_type))

    def watch_inflight_load(self, source: InflightLoadSource) -> None:
        self.sources.append(source)


def ep(i: int, role: str) -> Endpoint:
    return Endpoint(f"10.0.0.{i}:8000", f"pod-{i}", {ROLE_LABEL: role})


D, P, E = ep(1, "decode"), ep(2, "prefill"), ep(3, "encode")


def text(rid: str = "r", model: str = "tm", **kw: Any) -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model=model, prompt_text="x" * 400, **kw)


def image(rid: str = "r") -> LLMRequest:
    content = [
        {"type": "text", "text": "what"},
        {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
    ]
    return LLMRequest(
        request_id=rid,
        model="m",
        target_model="tm",
        messages=({"role": "user", "content": content},),
        api=ApiKind.CHAT_COMPLETIONS,
    )


def build(body: str) -> tuple[Scheduler, RecordingMetrics]:
    metrics = RecordingMetrics()
    return load_config_text(HEAD + body).build_scheduler(observer=metrics), metrics


PROFILES = """
- {type: encode-filter}
- {type: prefill-filter}
- {type: decode-filter}
- {type: always-disagg-pd-decider}
- {type: always-disagg-multimodal-decider}
- {type: max-score-picker}
schedulingProfiles:
- {name: decode, plugins: [{pluginRef: decode-filter}, {pluginRef: max-score-picker}]}
- {name: prefill, plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]}
- {name: encode, plugins: [{pluginRef: encode-filter}, {pluginRef: max-score-picker}]}
"""


def test_decision_type_table() -> None:
    """llm-d-router's DisaggDecisionType."""
    assert decision_type(False, False) == "decode-only"
    assert decision_type(False, True) == "prefill-decode"
    assert decision_type(True, False) == "encode-decode"
    assert decision_type(True, True) == "encode-prefill-decode"


EPD = (
    "plugins:\n- name: h\n  type: disagg-profile-handler\n"
    "  parameters:\n    deciders:\n      encode: always-disagg-multimodal-decider\n"
    "      prefill: always-disagg-pd-decider\n" + PROFILES
)
PD_MULTIMODAL = (
    "plugins:\n- name: h\n  type: disagg-profile-handler\n"
    "  parameters: {deciders: {prefill: always-disagg-multimodal-decider}}\n" + PROFILES
)
ED = (
    "plugins:\n- name: h\n  type: disagg-profile-handler\n"
    "  parameters: {deciders: {encode: always-disagg-multimodal-decider}}\n" + PROFILES
)
PREFILL_FIRST = (
    "plugins:\n- name: h\n  type: disagg-profile-handler\n  parameters: {stageOrder: prefill-first}\n"
    + PROFILES
)


@pytest.mark.parametrize(
    ("config", "request_", "pool", "expected"),
    [
        (EPD, image(), [D, P, E], "encode-prefill-decode"),
        (EPD, text(), [D, P, E], "prefill-decode"),  # the encode decider says no
        (EPD, image(), [D, P], "prefill-decode"),  # the encode run found no endpoint
        (EPD, image(), [D, E], "encode-decode"),  # the prefill run found no endpoint
        (EPD, text(), [D], "decode-only"),
        (PD_MULTIMODAL, text(), [D, P], "decode-only"),  # the prefill decider says no
        (PD_MULTIMODAL, image(), [D, P], "prefill-decode"),
        (ED, image(), [D, P, E], "encode-decode"),  # no prefill decider: prefill never runs
        (ED, text(), [D, E], "decode-only"),
        (PREFILL_FIRST, text(), [D, P], "prefill-decode"),
        (PREFILL_FIRST, text(), [D], "decode-only"),
    ],
)
def test_disagg_handler_records_one_decision_per_routed_request(
    config: str, request_: LLMRequest, pool: list[Endpoint], expected: str
) -> None:
    scheduler, metrics = build(config)
    scheduler.schedule(request_, pool)
    assert metrics.decisions == [("disagg", "disagg-profile-handler", "h", "tm", expected)]


@pytest.mark.parametrize("config", [EPD, PREFILL_FIRST])
def test_disagg_handler_records_nothing_when_decode_fails(config: str) -> None:
    scheduler, metrics = build(config)
    with pytest.raises(NoEndpointError):
        scheduler.schedule(image(), [P, E])
    assert metrics.decisions == []


PD = (
    "plugins:\n- name: pd\n  type: pd-profile-handler\n"
    "  parameters: {deciderPluginName: always-disagg-multimodal-decider}\n" + PROFILES
)


def test_pd_handler_records_its_decision_when_the_decider_is_asked() -> None:
    scheduler, metrics = build(PD)
    scheduler.schedule(text("a"), [D, P])
    scheduler.schedule(image("b"), [D, P])
    scheduler.schedule(image("c"), [D])  # prefill-decode is recorded before the prefill run fails
    with pytest.raises(NoEndpointError):
        scheduler.schedule(image("d"), [P])  # decode failed: the decider is not asked
    scheduler.schedule(text("e", model=""), [D, P])
    assert metrics.decisions == [
        ("pd", "pd-profile-handler", "pd", "tm", "decode-only"),
        ("pd", "pd-profile-handler", "pd", "tm", "prefill-decode"),
        ("pd", "pd-profile-handler", "pd", "tm", "prefill-decode"),
        ("pd", "pd-profile-handler", "pd", "", "decode-only"),
    ]


def test_plugins_report_nothing_without_a_plugin_metrics_observer() -> None:
    resolved = load_config_text(HEAD + PD)
    handler = resolved.handler
    resolved.build_scheduler(observer=RecordingObserver()).schedule(image(), [D, P])
    assert getattr(handler, "_metrics") is NO_PLUGIN_METRICS  # noqa: B009
    assert not isinstance(RecordingObserver(), PluginMetrics)
    assert isinstance(RecordingMetrics(), PluginMetrics)


# ------------------------------------------------------------------------------ in-flight load

INFLIGHT = """
plugins:
- {name: load, type: inflight-load-producer}
- {type: prefill-filter}
- {type: decode-filter}
- {type: always-disagg-pd-decider}
- {type: disagg-profile-handler, parameters: {deciders: {prefill: always-disagg-pd-decider}}}
- {type: max-score-picker}
- {type: active-request-scorer, parameters: {inFlightLoadProducerName: load}}
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: active-request-scorer}, {pluginRef: max-score-picker}]
- {name: prefill, plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]}
"""


def samples(source: InflightLoadSource) -> set[InflightSample]:
    return set(source.inflight_samples())


def test_inflight_samples_follow_dispatch_first_chunk_and_completion() -> None:
    scheduler, metrics = build(INFLIGHT)
    [source] = metrics.sources
    assert source.name == "load"
    assert samples(source) == set()
    a = text("a", stream=True)  # 400 chars: 100 prompt tokens
    b = text("b", fairness_id="tenant", priority=2)
    ra, rb = scheduler.schedule(a, [D, P]), scheduler.schedule(b, [D, P])
    scheduler.dispatched(a, ra)
    scheduler.dispatched(b, rb)
    assert samples(source) == {
        InflightSample("pod-1", "default-flow", 0, 1, 100),
        InflightSample("pod-2", "default-flow", 0, 1, 100),
        InflightSample("pod-1", "tenant", 2, 1, 100),
        InflightSample("pod-2", "tenant", 2, 1, 100),
    }
    scheduler.response_chunk(a, ra, b"data: {}\n\n")  # prefill done: its charge goes, decode keeps 1 request
    assert samples(source) == {
        InflightSample("pod-1", "default-flow", 0, 1, 0),
        InflightSample("pod-1", "tenant", 2, 1, 100),
        InflightSample("pod-2", "tenant", 2, 1, 100),
    }
    scheduler.completed(a, ra, Completion(Outcome.OK))
    scheduler.completed(b, rb, Completion(Outcome.CLIENT_CANCEL))
    assert samples(source) == set()


def test_inflight_samples_sum_requests_of_one_label_set() -> None:
    scheduler, metrics = build(INFLIGHT)
    [source] = metrics.sources
    requests = [text(f"r{i}", model="tm") for i in range(3)]
    for request in requests:
        scheduler.dispatched(request, scheduler.schedule(request, [D, P]))
    assert samples(source) == {
        InflightSample("pod-1", "default-flow", 0, 3, 300),
        InflightSample("pod-2", "default-flow", 0, 3, 300),
    }
    scheduler.endpoints_removed(frozenset({P.address}))
    assert samples(source) == {InflightSample("pod-1", "default-flow", 0, 3, 300)}
