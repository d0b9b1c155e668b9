"""utilization-filter and header-label-affinity-scorer (llm-d's test tables)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters import utilization
from scheduler.plugins.filters.utilization import UtilizationFilter
from scheduler.plugins.scorers import header_label_affinity
from scheduler.types import (
    Completion,
    Endpoint,
    LLMRequest,
    Metrics,
    Outcome,
    ProfileResult,
    SchedulingResult,
    ScoredEndpoint,
)

REQ = LLMRequest(request_id="r", model="m", target_model="m")


def ep(address: str, running: int = 0, waiting: int = 0, kv: float = 0.0) -> Endpoint:
    return Endpoint(
        address, metrics=Metrics(running_requests=running, waiting_queue_size=waiting, kv_cache_usage=kv)
    )


def build(params: dict[str, Any]) -> UtilizationFilter:
    plugin = utilization.factory("u", params, PluginHandle())
    assert isinstance(plugin, UtilizationFilter)
    return plugin


def cond(metric: str, cap: float) -> dict[str, Any]:
    return {"metric": metric, "maxValue": cap}


def dispatch(plugin: UtilizationFilter, address: str, n: int) -> None:
    for i in range(n):
        target = ProfileResult("d", (ScoredEndpoint(Endpoint(address), 1.0),))
        plugin.on_dispatched(
            LLMRequest(request_id=f"{address}-{i}", model="m", target_model="m"),
            SchedulingResult("d", (Endpoint(address),), {"d": target}),
        )


@pytest.mark.parametrize(
    ("conditions", "pool", "want"),
    [
        ([cond("running-requests", 5)], [ep("a", running=5), ep("b", running=6)], ["a"]),
        ([cond("waiting-queue", 0)], [ep("a", waiting=0), ep("b", waiting=1)], ["a"]),
        ([cond("kv-cache-utilization", 0.8)], [ep("a", kv=0.8), ep("b", kv=0.81)], ["a"]),
        (
            [cond("running-requests", 40), cond("waiting-queue", 0)],
            [ep("a", running=10), ep("b", running=41), ep("c", waiting=2)],
            ["a"],
        ),
        ([cond("running-requests", 1)], [ep("a", running=2), ep("b", running=3)], []),
    ],
)
def test_model_server_metrics(
    conditions: list[dict[str, Any]], pool: list[Endpoint], want: list[str]
) -> None:
    kept = build({"conditions": conditions}).filter(CycleState(), REQ, pool)
    assert [e.address for e in kept] == want


def test_fallback_on_empty() -> None:
    pool = [ep("a", running=2), ep("b", running=3)]
    plugin = build({"conditions": [cond("running-requests", 1)], "fallbackOnEmpty": True})
    assert plugin.filter(CycleState(), REQ, pool) == pool


def test_active_requests_from_own_accounting() -> None:
    plugin = build({"conditions": [cond("active-requests", 1)]})
    pool = [ep("a"), ep("b"), ep("c")]
    dispatch(plugin, "a", 1)
    dispatch(plugin, "b", 2)
    assert [e.address for e in plugin.filter(CycleState(), REQ, pool)] == ["a", "c"]  # c: no load, kept
    assert plugin.reason(CycleState(), REQ, pool[1]) == "active-requests 2 > 1"
    plugin.on_completed(
        LLMRequest(request_id="b-0", model="m", target_model="m"),
        SchedulingResult("d", (Endpoint("b"),), {}),
        Completion(Outcome.OK),
    )
    assert [e.address for e in plugin.filter(CycleState(), REQ, pool)] == ["a", "b", "c"]
    mixed = build({"conditions": [cond("active-requests", 0), cond("running-requests", 5)]})
    dispatch(mixed, "a", 1)
    assert [e.address for e in mixed.filter(CycleState(), REQ, [ep("a"), ep("b", running=9), ep("c")])] == [
        "c"
    ]
    not_counting = build({"conditions": [cond("running-requests", 5)]})
    dispatch(not_counting, "a", 3)
    assert len(not_counting.tracker) == 0


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"conditions": []},
        {"conditions": [{"maxValue": 1}]},
        {"conditions": [cond("unknown", 1)]},
        {"conditions": [{"metric": "active-requests"}]},
        {"conditions": [cond("active-requests", -1)]},
        {"conditions": [cond("kv-cache-utilization", 80)]},
        {"conditions": [cond("running-requests", 1)], "inFlightLoadProducerName": "p"},
        {"conditions": [{"metric": "running-requests", "maxValue": "5"}]},
    ],
)
def test_utilization_filter_rejects(params: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r'\(utilization-filter "u"\): parameters'):
        build(params)


# -- header-label-affinity-scorer -------------------------------------------------------------------


def test_header_label_affinity() -> None:
    plugin = header_label_affinity.factory(
        "s", {"headerName": "X-Disagg-Slice", "labelKey": "disaggregatedset.x-k8s.io/slice"}, PluginHandle()
    )
    pool = [
        Endpoint("a", labels={"disaggregatedset.x-k8s.io/slice": "0"}),
        Endpoint("b", labels={"disaggregatedset.x-k8s.io/slice": "1"}),
        Endpoint("c"),
    ]
    with_header = LLMRequest(request_id="r", model="m", target_model="m", headers={"x-disagg-slice": "1"})
    assert plugin.score(CycleState(), with_header, pool) == [0.0, 1.0, 0.0]  # type: ignore[attr-defined]
    assert plugin.score(CycleState(), REQ, pool) == [0.0, 0.0, 0.0]  # type: ignore[attr-defined]
    empty = LLMRequest(request_id="r", model="m", target_model="m", headers={"x-disagg-slice": ""})
    assert plugin.score(CycleState(), empty, pool) == [0.0, 0.0, 0.0]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"headerName": "x"},
        {"labelKey": "l"},
        {"headerName": "", "labelKey": "l"},
        {"headerName": "x", "labelKey": ""},
    ],
)
def test_header_label_affinity_requires_both(params: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r'\(header-label-affinity-scorer "s"\): parameters'):
        header_label_affinity.factory("s", params, PluginHandle())
