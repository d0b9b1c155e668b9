import random

import pytest
from plugin_builders import req

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.prefix_affinity import PrefixAffinityFilter, PrefixAffinityParams, factory
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.types import Endpoint, LLMRequest

A, B, C = (Endpoint(f"10.0.0.{i}:8000") for i in range(3))
NO_EXPLORE = PrefixAffinityParams(exploration_probability=0.0)


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
        (NO_EXPLORE, {A.address: 10, B.address: 10, C.address: 10}, 10, [A, B, C]),  # all sticky
        (PrefixAffinityParams(0.8, 1.0), {A.address: 10}, 10, [A, B, C]),  # always explore
    ],
)
def test_filter(
    params: PrefixAffinityParams, matched: dict[str, int] | None, total: int, expected: list[Endpoint]
) -> None:
    f = PrefixAffinityFilter("f", random.Random(1), lambda: 0.0, params)
    assert list(f.filter(cycle(matched, total), req(), [A, B, C])) == expected


def test_exploration_rate_is_about_one_percent_and_deterministic() -> None:
    f = PrefixAffinityFilter("f", random.Random(7), lambda: 0.0)
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
    f = PrefixAffinityFilter("f", random.Random(1), lambda: 0.0, NO_EXPLORE)
    assert f.reason(cycle({B.address: 5}), req(), B) == "prefix score 0.50 < affinityThreshold 0.80"


def dispatch(f: PrefixAffinityFilter, i: int, endpoint: Endpoint, tokens: int) -> None:
    from scheduler.types import ProfileResult, SchedulingResult, ScoredEndpoint

    request = LLMRequest(request_id=f"bg{i}", model="m", target_model="m", token_estimate=tokens)
    result = SchedulingResult("d", (endpoint,), {"d": ProfileResult("d", (ScoredEndpoint(endpoint, 1),))})
    f.on_dispatched(request, result)


@pytest.mark.parametrize(
    ("penalty_ms", "inflight_on_a", "expected"),
    [
        (1000.0, 0, [A]),  # sticky endpoint idle: stick
        (1000.0, 15928, [A]),  # 1000 ms vs 10 ms (B, C only prefill 160 tokens): 990 ms, within the penalty
        (1000.0, 40000, [A, B, C]),  # ~2.5 s behind: break stickiness
        (0.0, 400000, [A]),  # gate disabled: always stick
    ],
)
def test_ttft_load_gate(penalty_ms: float, inflight_on_a: int, expected: list[Endpoint]) -> None:
    params = PrefixAffinityParams(exploration_probability=0.0, max_ttft_penalty_ms=penalty_ms)
    f = PrefixAffinityFilter("f", random.Random(1), lambda: 0.0, params)
    if inflight_on_a:
        dispatch(f, 1, A, inflight_on_a)
    request = LLMRequest(request_id="r", model="m", target_model="m", token_estimate=160)
    # A holds all 10 blocks (160 tokens) of the prompt; B and C hold nothing.
    assert list(f.filter(cycle({A.address: 10}), request, [A, B, C])) == expected


def test_ttft_estimate_counts_inflight_and_uncached_tokens() -> None:
    f = PrefixAffinityFilter(
        "f", random.Random(1), lambda: 0.0, PrefixAffinityParams(peak_prefill_throughput=1000)
    )
    dispatch(f, 1, B, 500)
    request = LLMRequest(request_id="r", model="m", target_model="m", token_estimate=320)
    match = PrefixMatch(tuple(range(20)), {A.address: 10}, 16, "p")  # A caches 160 tokens
    assert f.ttft_ms(request, A, match) == pytest.approx(160.0)
    assert f.ttft_ms(request, B, match) == pytest.approx(820.0)
    from scheduler.types import Completion, Outcome, SchedulingResult

    f.on_completed(
        LLMRequest(request_id="bg1", model="m", target_model="m"),
        SchedulingResult("d", (), {}),
        Completion(Outcome.OK),
    )
    assert f.ttft_ms(request, B, match) == pytest.approx(320.0)


def test_llm_d_parameter_names() -> None:
    f = factory(
        "f",
        {
            "affinityThreshold": 0.9,
            "explorationProbability": 0,
            "maxTTFTPenaltyMs": 5000,
            "peakPrefillThroughput": 20000,
            "ttftSource": "prefillThroughput",
        },
        PluginHandle(),
    )
    assert isinstance(f, PrefixAffinityFilter)
    assert f.params == PrefixAffinityParams(0.9, 0.0, 5000.0, 20000.0)
    with pytest.raises(ConfigError, match="ttftSource"):
        factory("f", {"ttftSource": "sidecar"}, PluginHandle())
    predicted = factory("f", {"ttftSource": "latencyPredictor"}, PluginHandle())
    assert isinstance(predicted, PrefixAffinityFilter)
    assert [n.key for n in predicted.data_needs()][-1] == "LatencyPredictionInfo/predicted-latency-producer"
