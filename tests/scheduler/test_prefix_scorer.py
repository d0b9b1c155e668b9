"""prefix-cache-scorer: scores, dispatch updates (incl. P/D prefill), removal, autotuning, budget."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix.match import prefix_match
from scheduler.plugins.prefix.scorer import PrefixCacheScorer, factory
from scheduler.types import Endpoint, LLMRequest, Metrics, ProfileResult, SchedulingResult, ScoredEndpoint

EPS = [Endpoint(f"10.0.0.{i}:8000") for i in range(3)]


def make(**parameters: Any) -> PrefixCacheScorer:
    plugin = factory("prefix", parameters, PluginHandle())
    assert isinstance(plugin, PrefixCacheScorer)
    return plugin


def req(text: str, rid: str = "r", model: str = "m", salt: str = "") -> LLMRequest:
    return LLMRequest(request_id=rid, model=model, target_model=model, prompt_text=text, cache_salt=salt)


def dispatched(scorer: PrefixCacheScorer, request: LLMRequest, ep: Endpoint, headers: Any = None) -> None:
    result = SchedulingResult(
        primary_profile="default",
        endpoints=(ep,),
        profile_results={"default": ProfileResult("default", (ScoredEndpoint(ep, 1.0),))},
        headers=headers or {},
    )
    scorer.on_dispatched(request, result)


def scores(scorer: PrefixCacheScorer, request: LLMRequest, eps: list[Endpoint] = EPS) -> list[float]:
    cycle = CycleState()
    scorer.prepare(cycle, request, eps)
    return scorer.score(cycle, request, eps)


PROMPT = "".join(chr(65 + i) * 64 for i in range(8))  # 8 distinct 64-char blocks


@pytest.mark.parametrize(
    ("stored", "query", "expected"),
    [
        (PROMPT, PROMPT, 1.0),
        (PROMPT[: 64 * 4], PROMPT, 0.5),
        (PROMPT[: 64 * 2], PROMPT, 0.25),
        ("z" * 512, PROMPT, 0.0),
        (PROMPT, PROMPT[:63], 0.0),  # no full block
        (PROMPT, PROMPT + "tail-not-a-full-block", 1.0),
    ],
)
def test_score_is_matched_over_total_blocks(stored: str, query: str, expected: float) -> None:
    scorer = make(autoTune=False)
    dispatched(scorer, req(stored, "seed"), EPS[1])
    assert scores(scorer, req(query)) == [0.0, expected, 0.0]


def test_model_and_salt_separate_chains() -> None:
    scorer = make()
    dispatched(scorer, req(PROMPT, "a", model="m1"), EPS[0])
    assert scores(scorer, req(PROMPT, model="m2")) == [0.0, 0.0, 0.0]
    assert scores(scorer, req(PROMPT, model="m1", salt="s")) == [0.0, 0.0, 0.0]
    assert scores(scorer, req(PROMPT, model="m1")) == [1.0, 0.0, 0.0]


def test_prepare_publishes_shared_match() -> None:
    scorer = make()
    dispatched(scorer, req(PROMPT, "a"), EPS[2])
    cycle = CycleState()
    scorer.prepare(cycle, req(PROMPT[: 64 * 6]), EPS)
    found = prefix_match(cycle)
    assert found is not None and found.total_blocks == 6
    assert found.blocks(EPS[2].address) == 6 and found.score(EPS[0].address) == 0.0
    assert found.cached_tokens(EPS[2].address) == 6 * 16
    assert prefix_match(CycleState()) is None


def test_prefill_endpoint_is_updated_in_pd() -> None:
    scorer = make()
    dispatched(scorer, req(PROMPT), EPS[0], headers={"x-prefiller-host-port": EPS[2].address})
    assert scores(scorer, req(PROMPT)) == [1.0, 0.0, 1.0]


def test_removed_endpoints_are_purged() -> None:
    scorer = make()
    dispatched(scorer, req(PROMPT), EPS[0])
    scorer.on_endpoints_removed(frozenset({EPS[0].address}))
    assert scores(scorer, req(PROMPT)) == [0.0, 0.0, 0.0]
    assert scorer.index.addresses() == []


def test_block_size_params() -> None:
    assert make().block_chars == 64
    assert make(blockSizeTokens=32).block_chars == 128
    assert make(hashBlockSize=5).block_chars == 5
    assert make(blockSize=64).block_chars == 64


def test_autotune_learns_block_size_and_capacity() -> None:
    scorer = make()
    ep = Endpoint("10.0.0.9:8000", metrics=Metrics(block_size=32, num_gpu_blocks=100))
    scores(scorer, req(PROMPT), [ep])
    assert scorer.block_chars == 128
    dispatched(scorer, req(PROMPT), ep)
    assert scorer.index.capacity(ep.address) == 100
    assert scores(scorer, req(PROMPT), [ep]) == [1.0]


def test_autotune_disabled_keeps_configured_values() -> None:
    scorer = make(autoTune=False, lruCapacityPerServer=300)
    ep = Endpoint("10.0.0.9:8000", metrics=Metrics(block_size=32, num_gpu_blocks=100))
    scores(scorer, req(PROMPT), [ep])
    dispatched(scorer, req(PROMPT), ep)
    assert scorer.block_chars == 64 and scorer.index.capacity(ep.address) == 300


def test_autotuned_capacity_clamped_to_budget() -> None:
    scorer = make(maxIndexBytesPerServer=8 * 1024 * 1024)
    ep = Endpoint("10.0.0.9:8000", metrics=Metrics(block_size=16, num_gpu_blocks=10_000_000))
    dispatched(scorer, req(PROMPT), ep)
    assert scorer.index.capacity(ep.address) == 8 * 1024 * 1024 // 150


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"lruCapacityPerServer": 10_000_000},
            "lruCapacityPerServer 10000000 x ~150 bytes per entry = 1430.5 MiB per endpoint exceeds "
            "maxIndexBytesPerServer (64.0 MiB)",
        ),
        ({"blockSizeTokens": 0}, "parameters.blockSizeTokens: expected an integer >= 1 and <= 65536, got 0"),
        ({"blockSize": 64, "hashBlockSize": 64}, "give at most one of blockSize and hashBlockSize"),
        ({"maxPrefixBlocksToMatch": "many"}, "parameters.maxPrefixBlocksToMatch: expected an integer"),
    ],
)
def test_invalid_parameters(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        make(**parameters)
    assert message in str(info.value)
    assert '(prefix-cache-scorer "prefix")' in str(info.value)


def test_total_budget_is_shared_among_endpoints() -> None:
    # 1 MiB / 150 B = 6990 entries in all; each endpoint wants 5000
    scorer = make(autoTune=False, lruCapacityPerServer=5000, maxIndexBytes=1024 * 1024)
    eps = [Endpoint(f"10.1.0.{i}:8000") for i in range(30)]
    dispatched(scorer, req(PROMPT, "a"), eps[0])
    assert scorer.index.capacity(eps[0].address) == 5000
    dispatched(scorer, req(PROMPT, "b"), eps[1])
    assert [scorer.index.capacity(e.address) for e in eps[:2]] == [3495, 3495]
    dispatched(scorer, req(PROMPT, "c"), eps[2])
    assert scorer.index.capacity(eps[0].address) == 2330
    scorer.on_endpoints_removed(frozenset({eps[2].address}))
    assert scorer.index.capacity(eps[0].address) == 3495
    for i, ep in enumerate(eps):
        dispatched(scorer, req(PROMPT, f"d{i}"), ep)
    assert scorer.index.capacity(eps[0].address) == 256  # floor: one prompt's worth of blocks


def test_capacity_below_one_prompt_is_rejected() -> None:
    with pytest.raises(
        ConfigError, match=r"lruCapacityPerServer \(100\) must be at least maxPrefixBlocksToMatch"
    ):
        make(lruCapacityPerServer=100)


def test_pending_chains_are_bounded_and_recomputed_when_dropped() -> None:
    scorer = make()
    for i in range(1500):  # scheduled, never dispatched (e.g. the request failed later)
        scores(scorer, req(PROMPT, f"lost{i}"))
    assert len(scorer._pending) <= 1024
    dispatched(scorer, req(PROMPT, "lost0"), EPS[1])  # its chain was dropped: recomputed
    assert scores(scorer, req(PROMPT)) == [0.0, 1.0, 0.0]
