"""Property tests over every scorer, filter and saturation detector of this area.

Random endpoint sets (metrics, labels, adapters, readiness, staleness) and requests (adapter,
headers, token estimate). Checked: scores are in [0, 1] and aligned with the input; filters return
a subset of the input in input order; calls are pure (same answer twice, inputs not mutated);
detectors report saturation in [0, 1] with ``is_saturated == (saturation >= 1)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plugin_builders import req, routed

from scheduler.cycle_state import CycleState
from scheduler.handle import PluginHandle
from scheduler.plugins import register_builtin
from scheduler.plugins.filters.header_testing import TEST_SELECTION_HEADER
from scheduler.plugins.filters.roles import ROLE_LABEL
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.plugins.scorers.session_affinity import SESSION_TOKEN_HEADER, encode_token
from scheduler.registry import Registry
from scheduler.types import Endpoint, LLMRequest, Metrics

NOW = 1000.0
ADAPTERS = ["a", "b", "c", "d"]
ROLES = ["prefill", "decode", "both", "prefill-decode", "encode", "weird"]

_registry = Registry()
register_builtin(_registry)

SCORERS: dict[str, dict[str, Any]] = {
    "running-requests-size-scorer": {},
    "lora-affinity-scorer": {},
    "load-aware-scorer": {"threshold": 16},
    "active-request-scorer": {},
    "token-load-scorer": {"threshold": 5000},
    "session-affinity-scorer": {},
    "binpack-scorer": {},
    "spread-scorer": {"load": "queue", "capacity": 20},
    "no-hit-lru-scorer": {},
    "context-length-aware": {},
    "header-label-affinity-scorer": {"headerName": "x-zone", "labelKey": "zone"},
    "topology-affinity-scorer": {},
}
FILTERS: dict[str, dict[str, Any]] = {
    "label-selector-filter": {
        "matchLabels": {"zone": "a"},
        "matchExpressions": [{"key": ROLE_LABEL, "operator": "NotIn", "values": ["prefill"]}],
    },
    "ready-filter": {},
    "lora-fit-filter": {},
    "header-based-testing-filter": {},
    "prefill-filter": {},
    "decode-filter": {},
    "encode-filter": {},
    "utilization-detector": {},
    "concurrency-detector": {"maxConcurrency": 2},
    "kv-headroom-filter": {},
    "prefix-cache-affinity-filter": {"explorationProbability": 0.2},
    "least-queue-filter": {},
    "least-kv-cache-filter": {},
    "low-queue-filter": {"threshold": 50},
    "lora-affinity-filter": {"threshold": 0.5},
    "by-label": {"label": ROLE_LABEL, "validValues": ["decode", "both"], "allowsNoLabel": True},
    "by-label-selector": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]},
    "context-length-aware": {"enableFiltering": True},
    "session-affinity-filter": {},
    "topology-affinity-filter": {"minAffinity": "zone"},
    "utilization-filter": {
        "conditions": [
            {"metric": "active-requests", "maxValue": 1},
            {"metric": "waiting-queue", "maxValue": 5},
        ]
    },
}
DETECTORS = ["utilization-detector", "concurrency-detector"]

adapter_sets = st.frozensets(st.sampled_from(ADAPTERS), max_size=3)


@st.composite
def endpoints(draw: st.DrawFn) -> list[Endpoint]:
    n = draw(st.integers(0, 12))
    out = []
    for i in range(n):
        labels: dict[str, str] = {}
        if draw(st.booleans()):
            labels[ROLE_LABEL] = draw(st.sampled_from(ROLES))
        if draw(st.booleans()):
            labels["zone"] = draw(st.sampled_from(["a", "b"]))
        metrics = Metrics(
            waiting_queue_size=draw(st.integers(0, 200)),
            running_requests=draw(st.integers(0, 300)),
            kv_cache_usage=draw(st.floats(0.0, 1.0)),
            max_lora=draw(st.integers(0, 4)),
            running_adapters=draw(adapter_sets),
            waiting_adapters=draw(adapter_sets),
            updated_at=draw(st.sampled_from([0.0, NOW - 5.0, NOW - 0.1, NOW - 0.01])),
            block_size=draw(st.sampled_from([None, 16, 32])),
            num_gpu_blocks=draw(st.sampled_from([None, 0, 100, 5000])),
        )
        attributes = {"draining": True} if draw(st.integers(0, 9)) == 0 else {}
        out.append(
            Endpoint(
                f"10.0.{i // 250}.{i % 250}:8000",
                f"ep{i}",
                labels,
                draw(st.booleans()) or i == 0,
                metrics,
                attributes,
            )
        )
    return out


@st.composite
def requests(draw: st.DrawFn, eps: list[Endpoint]) -> LLMRequest:
    headers: dict[str, str] = {}
    if eps and draw(st.booleans()):
        headers[SESSION_TOKEN_HEADER] = encode_token(draw(st.sampled_from(eps)).address)
    if eps and draw(st.booleans()):
        picked = draw(st.lists(st.sampled_from(eps), max_size=3))
        headers[TEST_SELECTION_HEADER] = ",".join(e.address for e in picked)
    adapter = draw(st.one_of(st.none(), st.sampled_from(ADAPTERS)))
    return LLMRequest(
        request_id="probe",
        model="m",
        target_model=adapter or "m",
        adapter=adapter,
        headers=headers,
        token_estimate=draw(st.integers(0, 4000)),
        stream=draw(st.booleans()),
    )


@st.composite
def cycles(draw: st.DrawFn, eps: list[Endpoint]) -> Callable[[], CycleState]:
    """A factory of fresh cycle states, with or without a random prefix match."""
    match = None
    if draw(st.booleans()):
        total = draw(st.integers(0, 20))
        matched = {e.address: draw(st.integers(0, total)) for e in eps if draw(st.booleans())}
        match = PrefixMatch(tuple(range(total)), matched, 16, "prefix-cache-scorer")

    def make() -> CycleState:
        cycle = CycleState(now=NOW)
        if match is not None:
            cycle.write(PREFIX_MATCH, match)
        return cycle

    return make


Scenario = tuple[list[Endpoint], LLMRequest, Callable[[], CycleState]]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """Endpoints, a request routed among them and a cycle-state factory."""
    eps = draw(endpoints())
    return eps, draw(requests(eps)), draw(cycles(eps))


def build(plugin_type: str, parameters: dict[str, Any], eps: list[Endpoint], load: list[int]) -> Any:
    """A fresh plugin; stateful ones first see ``load`` dispatches (indices into ``eps``)."""
    plugin = _registry.create(plugin_type, "p", parameters, PluginHandle(clock=lambda: NOW))
    if hasattr(plugin, "on_dispatched") and eps:
        for n, i in enumerate(load):
            e = eps[i % len(eps)]
            plugin.on_dispatched(req(n, tokens=100 * n), routed(e))
    return plugin


def snapshot(eps: list[Endpoint], request: LLMRequest) -> Any:
    return copy.deepcopy(
        ([(e, dict(e.labels), dict(e.attributes)) for e in eps], request, dict(request.headers))
    )


def check_pure(call: Callable[[], Any], eps: list[Endpoint], request: LLMRequest) -> Any:
    before = snapshot(eps, request)
    first = call()
    second = call()
    assert list(first) == list(second)
    assert snapshot(eps, request) == before
    return first


common = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(scenario=scenarios(), load=st.lists(st.integers(0, 20), max_size=8))
def test_scorers(scenario: Scenario, load: list[int]) -> None:
    eps, request, cycle = scenario
    for plugin_type, parameters in SCORERS.items():
        scorer = build(plugin_type, parameters, eps, load)
        scores = check_pure(lambda s=scorer: s.score(cycle(), request, eps), eps, request)
        assert len(scores) == len(eps), plugin_type
        assert all(0.0 <= s <= 1.0 for s in scores), (plugin_type, scores)


@common
@given(scenario=scenarios(), load=st.lists(st.integers(0, 20), max_size=8))
def test_filters(scenario: Scenario, load: list[int]) -> None:
    eps, request, cycle = scenario
    for plugin_type, parameters in FILTERS.items():
        f = build(plugin_type, parameters, eps, load)
        kept = check_pure(lambda f=f: f.filter(cycle(), request, eps), eps, request)
        positions = [next(i for i, e in enumerate(eps) if e is k) for k in kept]
        assert positions == sorted(set(positions)), plugin_type  # a subset, in input order
        if hasattr(f, "reason"):
            for e in eps:
                if all(e is not k for k in kept):
                    assert isinstance(f.reason(cycle(), request, e), str)


@common
@given(data=st.data(), load=st.lists(st.integers(0, 20), max_size=12))
def test_detectors(data: st.DataObject, load: list[int]) -> None:
    eps = data.draw(endpoints())
    for plugin_type in DETECTORS:
        d = build(plugin_type, FILTERS[plugin_type], eps, load)
        saturation = d.saturation(eps, NOW)
        assert 0.0 <= saturation <= 1.0
        assert d.is_saturated(eps, NOW) is (saturation >= 1.0)
