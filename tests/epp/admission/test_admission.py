"""Admission: subset selection, saturation shedding, objective priorities."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from epp.admission import (
    Admitter,
    InferenceObjective,
    InMemoryObjectiveStore,
    ObjectivePriorities,
    host_of,
    select_subset,
)
from epp.request import RequestError
from scheduler.types import Endpoint, EndpointView, LLMRequest

POOL = [
    Endpoint("10.0.0.1:8000"),
    Endpoint("10.0.0.1:8001"),
    Endpoint("10.0.0.2:8000"),
    Endpoint("[fd00::1]:8000"),
]


class FakeDetector:
    plugin_type = "fake-detector"
    name = "fake"

    def __init__(self, saturated: bool) -> None:
        self.saturated = saturated
        self.calls: list[tuple[int, float]] = []

    def saturation(self, endpoints: Sequence[EndpointView], now: float) -> float:
        return 1.0 if self.saturated else 0.0

    def is_saturated(self, endpoints: Sequence[EndpointView], now: float) -> bool:
        self.calls.append((len(endpoints), now))
        return self.saturated


def req(priority: int = 0) -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model="m", priority=priority)


@pytest.mark.parametrize(
    "subset, expected",
    [
        ({"10.0.0.1:8000"}, ["10.0.0.1:8000"]),
        ({"10.0.0.1"}, ["10.0.0.1:8000", "10.0.0.1:8001"]),
        ({"10.0.0.2:8000", "10.0.0.1:8001"}, ["10.0.0.1:8001", "10.0.0.2:8000"]),
        ({"fd00::1"}, ["[fd00::1]:8000"]),
        ({"[fd00::1]"}, ["[fd00::1]:8000"]),
        ({"[fd00::1]:8000"}, ["[fd00::1]:8000"]),
        ({"10.0.0.1:9999"}, []),
        ({"10.0.0.9"}, []),
    ],
)
def test_select_subset(subset: set[str], expected: list[str]) -> None:
    assert [e.address for e in select_subset(POOL, frozenset(subset))] == expected


def test_host_of() -> None:
    assert host_of("1.2.3.4:80") == "1.2.3.4" and host_of("[::1]:80") == "::1" and host_of("::1") == "::1"


def test_admit_without_subset_returns_pool() -> None:
    assert list(Admitter(None, lambda: 0.0).admit(req(), None, POOL)) == POOL


@pytest.mark.parametrize(
    "subset, endpoints, fragment",
    [
        (None, [], "no ready endpoints"),
        (frozenset(), POOL, "empty"),
        (frozenset({"10.9.9.9:1"}), POOL, "subset"),
    ],
)
def test_admit_503(subset: frozenset[str] | None, endpoints: list[Endpoint], fragment: str) -> None:
    with pytest.raises(RequestError) as info:
        Admitter(None, lambda: 0.0).admit(req(), subset, endpoints)
    assert info.value.status == 503 and info.value.error_type == "service_unavailable"
    assert fragment in info.value.message


def test_sheddable_request_rejected_with_429_when_saturated() -> None:
    detector = FakeDetector(saturated=True)
    admitter = Admitter(detector, lambda: 12.5)
    with pytest.raises(RequestError) as info:
        admitter.admit(req(-1), frozenset({"10.0.0.1"}), POOL)
    assert info.value.status == 429 and info.value.error_type == "rate_limit_exceeded"
    assert detector.calls == [(len(POOL), 12.5)]  # the whole pool, at the injected time
    assert admitter.shed_total == 1


@pytest.mark.parametrize("priority, saturated", [(0, True), (5, True), (-1, False)])
def test_not_shed(priority: int, saturated: bool) -> None:
    assert Admitter(FakeDetector(saturated), lambda: 0.0).admit(req(priority), None, POOL) == POOL


def test_objective_priorities() -> None:
    store = InMemoryObjectiveStore([InferenceObjective("critical", 10), InferenceObjective("batch", -5)])
    unknown: list[str] = []
    prio = ObjectivePriorities(store, unknown.append)
    assert prio(None) == 0 and prio("") == 0
    assert prio("critical") == 10 and prio("batch") == -5
    assert prio("nope") == 0 and unknown == ["nope"] and prio.unknown_total == 1
    store.upsert(InferenceObjective("nope", 3))
    assert prio("nope") == 3
    store.delete("nope")
    store.delete("never-there")
    assert prio("nope") == 0 and prio.unknown_total == 2
    store.replace_all([InferenceObjective("only", 1)])
    assert len(store) == 1 and prio("critical") == 0


def _pool(ready: list[bool]) -> list[Endpoint]:
    return [Endpoint(f"10.0.1.{i}:8000", ready=r) for i, r in enumerate(ready)]


@pytest.mark.parametrize(
    "ready, subset, expected, none_ready",
    [
        ([True, False, True], None, ["10.0.1.0:8000", "10.0.1.2:8000"], 0),  # a dead server is skipped
        ([True, True], None, ["10.0.1.0:8000", "10.0.1.1:8000"], 0),
        ([False, False], None, ["10.0.1.0:8000", "10.0.1.1:8000"], 1),  # nothing known: keep all
        ([True, False], frozenset({"10.0.1.1:8000"}), ["10.0.1.1:8000"], 1),  # hint names only a dead one
        ([False, True, True], frozenset({"10.0.1.0", "10.0.1.1"}), ["10.0.1.1:8000"], 0),
    ],
)
def test_only_ready_endpoints_are_candidates(
    ready: list[bool], subset: frozenset[str] | None, expected: list[str], none_ready: int
) -> None:
    admitter = Admitter(None, lambda: 0.0)
    assert [e.address for e in admitter.admit(req(), subset, _pool(ready))] == expected
    assert admitter.none_ready_total == none_ready
