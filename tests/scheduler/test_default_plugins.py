"""Table-driven tests of queue-scorer, kv-cache-utilization-scorer, the pickers and single-profile-handler."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import NoEndpointError
from scheduler.handle import PluginHandle
from scheduler.plugins.handlers.single_profile import SingleProfileHandler
from scheduler.plugins.pickers import max_score, random_picker, weighted_random
from scheduler.plugins.scorers.kv_cache_utilization import KVCacheUtilizationScorer
from scheduler.plugins.scorers.queue import QueueScorer
from scheduler.types import Endpoint, LLMRequest, Metrics, ProfileResult, ScoredEndpoint

REQ = LLMRequest("r", "m", "m")


def eps_with(**series: list[Any]) -> list[Endpoint]:
    n = len(next(iter(series.values())))
    return [
        Endpoint(f"10.0.0.{i}:8000", metrics=Metrics(**{k: v[i] for k, v in series.items()}))
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("queues", "expected"),
    [
        ([0, 5, 10], [1.0, 0.5, 0.0]),
        ([3, 3, 3], [1.0, 1.0, 1.0]),
        ([7], [1.0]),
        ([2, 6], [1.0, 0.0]),
        ([0, 1, 4], [1.0, 0.75, 0.0]),
    ],
)
def test_queue_scorer(queues: list[int], expected: list[float]) -> None:
    assert QueueScorer("q").score(CycleState(), REQ, eps_with(waiting_queue_size=queues)) == expected


def test_queue_scorer_empty() -> None:
    assert QueueScorer("q").score(CycleState(), REQ, []) == []


@pytest.mark.parametrize(
    ("usage", "expected"),
    [([0.0, 0.25, 1.0], [1.0, 0.75, 0.0]), ([1.5, -0.2], [0.0, 1.0]), ([float("nan"), 0.5], [0.0, 0.5])],
)
def test_kv_cache_utilization_scorer(usage: list[float], expected: list[float]) -> None:
    got = KVCacheUtilizationScorer("kv").score(CycleState(), REQ, eps_with(kv_cache_usage=usage))
    assert got == pytest.approx(expected)


def scored(*scores: float) -> list[ScoredEndpoint]:
    return [ScoredEndpoint(Endpoint(f"10.0.0.{i}:8000"), s) for i, s in enumerate(scores)]


def picker(module: Any, n: int = 1, seed: int = 0) -> Any:
    return module.factory("p", {"maxNumOfEndpoints": n}, PluginHandle(seed))


def addresses(picked: Any) -> list[str]:
    return [p.endpoint.address for p in picked]


@pytest.mark.parametrize(
    ("scores", "n", "expected"),
    [
        ((0.1, 0.9, 0.5), 1, ["10.0.0.1:8000"]),
        ((0.1, 0.9, 0.5), 2, ["10.0.0.1:8000", "10.0.0.2:8000"]),
        ((0.1, 0.9, 0.5), 5, ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.0:8000"]),
    ],
)
def test_max_score_picker(scores: tuple[float, ...], n: int, expected: list[str]) -> None:
    assert addresses(picker(max_score, n).pick(CycleState(), REQ, scored(*scores))) == expected


def test_max_score_picker_breaks_ties_at_random() -> None:
    p = picker(max_score)
    wins = Counter(addresses(p.pick(CycleState(), REQ, scored(1.0, 1.0, 0.2)))[0] for _ in range(400))
    assert set(wins) == {"10.0.0.0:8000", "10.0.0.1:8000"}
    assert min(wins.values()) > 120


def test_random_picker_distinct_and_uniform() -> None:
    p = picker(random_picker, 2)
    counts: Counter[str] = Counter()
    for _ in range(600):
        got = addresses(p.pick(CycleState(), REQ, scored(0.0, 1.0, 0.5)))
        assert len(got) == len(set(got)) == 2
        counts.update(got)
    assert min(counts.values()) > 300


def test_weighted_random_picker_follows_scores() -> None:
    p = picker(weighted_random)
    wins = Counter(addresses(p.pick(CycleState(), REQ, scored(0.1, 0.9, 0.0)))[0] for _ in range(2000))
    assert "10.0.0.2:8000" not in wins  # zero score excluded
    assert 0.84 < wins["10.0.0.1:8000"] / 2000 < 0.96


def test_weighted_random_picker_all_zero_is_uniform() -> None:
    p = picker(weighted_random, 3)
    got = addresses(p.pick(CycleState(), REQ, scored(0.0, 0.0, 0.0)))
    assert sorted(got) == ["10.0.0.0:8000", "10.0.0.1:8000", "10.0.0.2:8000"]


def test_weighted_random_picker_returns_only_positive() -> None:
    got = addresses(picker(weighted_random, 3).pick(CycleState(), REQ, scored(0.0, 0.5, 0.0)))
    assert got == ["10.0.0.1:8000"]


@pytest.mark.parametrize("module", [max_score, random_picker, weighted_random])
def test_same_seed_same_decision(module: Any) -> None:
    items = scored(0.3, 0.3, 0.3, 0.6, 0.6)
    runs = []
    for _ in range(2):
        p = picker(module, 2, seed=7)
        runs.append([tuple(addresses(p.pick(CycleState(), REQ, items))) for _ in range(20)])
    assert runs[0] == runs[1]
    assert len(set(runs[0])) > 1  # the source is random, just seeded


def test_single_profile_handler() -> None:
    h = SingleProfileHandler("h")
    profiles: dict[str, Any] = {"default": object()}
    assert h.pick_profiles(CycleState(), REQ, profiles, {}) == profiles
    result = ProfileResult("default", tuple(scored(1.0, 0.5)))
    assert h.pick_profiles(CycleState(), REQ, profiles, {"default": result}) == {}
    out = h.process_results(CycleState(), REQ, {"default": result})
    assert out.primary_profile == "default" and out.addresses == ("10.0.0.0:8000", "10.0.0.1:8000")
    with pytest.raises(NoEndpointError, match='profile "default" found no endpoint'):
        h.process_results(CycleState(), REQ, {"default": None})
