import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.handlers.disagg_deciders import (
    PDDecider,
    PrefixBasedDecider,
    PrefixBasedDeciderParams,
    prefix_based_factory,
)
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.types import Endpoint, LLMRequest

DECODE = Endpoint("10.0.0.1:8000")


def cycle(blocks: int | None) -> CycleState:
    c = CycleState()
    if blocks is not None:
        c.write(PREFIX_MATCH, PrefixMatch(tuple(range(64)), {DECODE.address: blocks}, 16, "p"))
    return c


@pytest.mark.parametrize(
    ("threshold", "tokens", "cached_blocks", "expected"),
    [
        (0, 10, None, False),  # 0 = the decider is disabled (llm-d-router, llm-d-inference-scheduler)
        (0, 4096, 0, False),
        (256, 255, None, False),  # prompt shorter than the threshold
        (256, 256, None, True),  # no prefix match: nothing cached
        (256, 1024, 0, True),
        (256, 1024, 48, True),  # 1024 - 768 = 256 uncached
        (256, 1024, 49, False),  # 240 uncached
        (256, 1024, 64, False),  # fully cached: the last block is recomputed (16 uncached)
        (16, 1024, 64, True),  # ... which is exactly 16
        (16, 1025, 64, False),  # 1025 tokens, 1024 cached: 1 uncached
    ],
)
def test_decide(threshold: int, tokens: int, cached_blocks: int | None, expected: bool) -> None:
    d = PrefixBasedDecider("d", PrefixBasedDeciderParams(threshold))
    assert isinstance(d, PDDecider)
    request = LLMRequest(request_id="r", model="m", target_model="m", token_estimate=tokens)
    assert d.should_disaggregate(cycle(cached_blocks), request, DECODE) is expected


@pytest.mark.parametrize(
    ("prompt_gate", "tokens", "threshold", "expected"),
    [(100, 99, 1, False), (100, 100, 1, True), (100, 500, 600, False), (0, 5, 1, True), (100, 500, 0, False)],
)
def test_prompt_tokens_gate(prompt_gate: int, tokens: int, threshold: int, expected: bool) -> None:
    d = PrefixBasedDecider("d", PrefixBasedDeciderParams(threshold, prompt_gate))
    request = LLMRequest(request_id="r", model="m", target_model="m", token_estimate=tokens)
    assert d.should_disaggregate(cycle(None), request, DECODE) is expected


def test_prompt_text_fallback() -> None:
    d = PrefixBasedDecider("d", PrefixBasedDeciderParams(100))
    request = LLMRequest(request_id="r", model="m", target_model="m", prompt_text="x" * 400)
    assert d.uncached_tokens(cycle(None), request, DECODE) == 100


def test_parameters() -> None:
    d = prefix_based_factory("d", {"nonCachedTokens": 512}, PluginHandle())
    assert isinstance(d, PrefixBasedDecider) and d.params == PrefixBasedDeciderParams(512)
    assert prefix_based_factory("d", {"promptTokens": 64}, PluginHandle()).params == PrefixBasedDeciderParams(
        0, 64
    )  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r'prefix-based-pd-decider "d"\): parameters\.nonCachedTokens'):
        prefix_based_factory("d", {"nonCachedTokens": -1}, PluginHandle())
