import random

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.prefix_affinity import PrefixAffinityFilter, PrefixAffinityParams, factory
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.types import Endpoint, LLMRequest

A, B, C = (Endpoint(f"10.0.0.{i}:8000") for i in range(3))
NO_EXPLORE = PrefixAffinityParams(exploration_probability=0.0)


def req(i: int = 0) -> LLMRequest:
    return LLMRequest(request_id=f"r{i}", model="m", target_model="m")


def cycle(matched: dict[str, int] | None, total: int = 10) -> CycleState:
    c = CycleState()
    if matched is not None:
        c.write(PREFIX_MATCH, PrefixMatch(tuple(range(total)), matched, 16, "p"))
    return c


@pytest.mark.parametrize(
    ("params", "matched", "total", "expected"),
    [
        (NO_EXPLORE, {A.address: 10, B.address: 8, C.address: 7}, 10, [A, B]),
        (NO_EXPLORE, {C.address: 9}, 10, [C]),
        (NO_EXPLORE, {A.address: 7}, 10, [A, B, C]),  # none reaches the threshold: keep all
        (NO_EXPLORE, {}, 0, [A, B, C]),  # prompt shorter than a block
        (NO_EXPLORE, None, 10, [A, B, C]),  # no prefix scorer configured
        (PrefixAffinityParams(0.5, 0.0), {A.address: 5, B.address: 4}, 10, [A]),
        (PrefixAffinityParams(0.8, 1.0), {A.address: 10}, 10, [A, B, C]),  # always explore
    ],
)
def test_filter(
    params: PrefixAffinityParams, matched: dict[str, int] | None, total: int, expected: list[Endpoint]
) -> None:
    f = PrefixAffinityFilter("f", random.Random(1), params)
    assert list(f.filter(cycle(matched, total), req(), [A, B, C])) == expected


def test_exploration_rate_is_about_one_percent_and_deterministic() -> None:
    f = PrefixAffinityFilter("f", random.Random(7))
    explored = [f.explores(req(i)) for i in range(20000)]
    assert 100 < sum(explored) < 300
    assert explored == [f.explores(req(i)) for i in range(20000)]  # pure per request id


def test_factory_seeds_from_handle_and_validates() -> None:
    a = factory("f", {}, PluginHandle(seed=3))
    b = factory("f", {}, PluginHandle(seed=3))
    assert isinstance(a, PrefixAffinityFilter) and isinstance(b, PrefixAffinityFilter)
    assert [a.explores(req(i)) for i in range(3000)] == [b.explores(req(i)) for i in range(3000)]
    with pytest.raises(ConfigError, match="affinityThreshold"):
        factory("f", {"affinityThreshold": 0}, PluginHandle())
    with pytest.raises(ConfigError, match="explorationProbability"):
        factory("f", {"explorationProbability": 1.5}, PluginHandle())


def test_reason() -> None:
    f = PrefixAffinityFilter("f", random.Random(1), NO_EXPLORE)
    assert f.reason(cycle({B.address: 5}), req(), B) == "prefix score 0.50 < affinityThreshold 0.80"
