"""This area's plugins loaded from configuration text and driven through the Scheduler and its hooks."""

from scheduler.config import load_config_text
from scheduler.errors import ConfigError
from scheduler.plugins.filters.roles import ROLE_LABEL
from scheduler.plugins.handlers.disagg import PREFILLER_HEADER
from scheduler.plugins.scorers.session_affinity import SESSION_TOKEN_HEADER, encode_token
from scheduler.types import Completion, Endpoint, LLMRequest, Metrics, Outcome

NOW = 100.0
FRESH = NOW - 0.05

CONFIG = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: ready-filter
- type: label-selector-filter
  parameters:
    matchExpressions: [{key: pool, operator: In, values: [main]}]
- type: utilization-detector
  parameters: {queueDepthThreshold: 10}
- type: active-request-scorer
- type: session-affinity-scorer
- type: load-aware-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: ready-filter
  - pluginRef: label-selector-filter
  - pluginRef: utilization-detector
  - pluginRef: active-request-scorer
    weight: 1
  - pluginRef: session-affinity-scorer
    weight: 10
  - pluginRef: load-aware-scorer
  - pluginRef: max-score-picker
saturationDetector: {pluginRef: utilization-detector}
"""


def ep(
    i: int, pool: str = "main", queue: int = 0, updated: float = FRESH, role: str | None = None
) -> Endpoint:
    labels = {"pool": pool} | ({ROLE_LABEL: role} if role else {})
    return Endpoint(
        f"10.0.0.{i}:8000", f"ep{i}", labels, True, Metrics(waiting_queue_size=queue, updated_at=updated)
    )


def req(i: int, headers: dict[str, str] | None = None, tokens: int = 0) -> LLMRequest:
    return LLMRequest(
        f"r{i}", "m", "m", headers=headers or {}, token_estimate=tokens, prompt_text="x" * 4 * tokens
    )


def test_routing_with_session_affinity_and_inflight_accounting() -> None:
    scheduler = load_config_text(CONFIG, clock=lambda: NOW).build_scheduler()
    pool = [ep(1), ep(2), ep(3, pool="canary"), ep(4, updated=NOW - 10), ep(5, queue=20)]
    first = scheduler.schedule(req(1), pool)
    assert first.primary.address in {"10.0.0.1:8000", "10.0.0.2:8000"}
    scheduler.dispatched(req(1), first)
    # The next request avoids the endpoint with a request in flight ...
    second = scheduler.schedule(req(2), pool)
    assert second.primary.address != first.primary.address
    # ... unless its session token pins it there (weight 10 beats active-request's weight 1).
    pinned = req(3, {SESSION_TOKEN_HEADER: encode_token(first.primary.address)})
    assert scheduler.schedule(pinned, pool).primary.address == first.primary.address
    scheduler.completed(req(1), first, Completion(Outcome.OK))
    scheduler.completed(req(1), first, Completion(Outcome.OK))  # reported twice: harmless
    decision = scheduler.schedule(req(4), pool).decision
    assert decision is not None
    removed = {a: r for step in decision.profiles[0].filters for a, r in step.removed}
    assert removed["10.0.0.3:8000"] == "labels do not match selector requirement pool in (main)"
    assert removed["10.0.0.4:8000"].startswith("metrics stale")
    assert removed["10.0.0.5:8000"] == "queue 20 >= 10"
    assert scheduler.saturation_detector is not None


PD_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: prefix-cache-scorer
- type: no-hit-lru-scorer
- type: prefix-based-pd-decider
  parameters: {nonCachedTokens: 64}
- type: disagg-profile-handler
  parameters: {prefillDeciderPluginName: prefix-based-pd-decider}
- type: max-score-picker
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: prefix-cache-scorer}, {pluginRef: max-score-picker}]
- name: decode
  plugins:
  - {pluginRef: decode-filter}
  - {pluginRef: prefix-cache-scorer, weight: 2}
  - {pluginRef: no-hit-lru-scorer}
  - {pluginRef: max-score-picker}
"""


def test_pd_disaggregates_long_uncached_prompts_only() -> None:
    scheduler = load_config_text(PD_CONFIG, clock=lambda: NOW).build_scheduler()
    pool = [ep(1, role="decode"), ep(2, role="decode"), ep(3, role="prefill")]
    short = scheduler.schedule(req(1, tokens=10), pool)
    assert PREFILLER_HEADER not in short.headers
    long = req(2, tokens=400)
    result = scheduler.schedule(long, pool)
    assert result.primary_profile == "decode" and result.headers[PREFILLER_HEADER] == "10.0.0.3:8000"
    scheduler.dispatched(long, result)
    # The same prompt again: the decode endpoint now holds it, so no prefill step.
    again = scheduler.schedule(req(3, tokens=400), pool)
    assert again.primary.address == result.primary.address
    assert PREFILLER_HEADER not in again.headers
    # A cold request goes to the other decode endpoint (no-hit-lru spreads cold requests).
    cold = LLMRequest("r4", "m", "m", prompt_text="y" * 1600, token_estimate=400)
    assert scheduler.schedule(cold, pool).primary.address != result.primary.address


def test_bad_plugin_parameters_name_the_plugin() -> None:
    text = CONFIG.replace("parameters: {queueDepthThreshold: 10}", "parameters: {queueDepthThreshold: ten}")
    try:
        load_config_text(text)
    except ConfigError as exc:
        assert 'utilization-detector "utilization-detector"' in str(exc)
        assert "queueDepthThreshold" in str(exc) and "expected an integer" in str(exc)
    else:
        raise AssertionError("expected ConfigError")
