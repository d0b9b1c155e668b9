import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.kv_headroom import KvHeadroomFilter, KvHeadroomParams, factory
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.types import Endpoint, LLMRequest, Metrics


def ep(i: int, usage: float, blocks: int | None = 1000, block_size: int | None = 16) -> Endpoint:
    m = Metrics(kv_cache_usage=usage, num_gpu_blocks=blocks, block_size=block_size)
    return Endpoint(f"10.0.0.{i}:8000", metrics=m)


EMPTY = ep(1, 0.0)  # 1000 free blocks
HALF = ep(2, 0.5)  # 500 free
FULLISH = ep(3, 0.9)  # 100 free
UNKNOWN = ep(4, 0.99, blocks=None)


def req(tokens: int, prompt: str = "") -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model="m", token_estimate=tokens, prompt_text=prompt)


def cycle(matched: dict[str, int] | None = None) -> CycleState:
    c = CycleState()
    if matched is not None:
        c.write(PREFIX_MATCH, PrefixMatch(tuple(range(500)), matched, 16, "p"))
    return c


@pytest.mark.parametrize(
    ("reserve", "tokens", "matched", "expected"),
    [
        (0.0, 1600, None, [EMPTY, HALF, FULLISH, UNKNOWN]),  # 100 blocks: fits everywhere
        (0.0, 1601, None, [EMPTY, HALF, UNKNOWN]),  # 101 blocks
        (0.05, 1600, None, [EMPTY, HALF, UNKNOWN]),  # + 50 reserve
        (0.05, 8000, None, [EMPTY, UNKNOWN]),  # 500 + 50
        (0.05, 8000, {HALF.address: 100}, [EMPTY, HALF, UNKNOWN]),  # 1600 cached on HALF: 400 + 50
        (0.05, 8000, {FULLISH.address: 500}, [EMPTY, FULLISH, UNKNOWN]),  # fully cached: reserve only
        (0.0, 40000, None, [UNKNOWN]),  # only the endpoint without cache configuration passes
        (0.0, 0, None, [EMPTY, HALF, FULLISH, UNKNOWN]),
    ],
)
def test_filter(
    reserve: float, tokens: int, matched: dict[str, int] | None, expected: list[Endpoint]
) -> None:
    f = KvHeadroomFilter("k", KvHeadroomParams(reserve))
    assert list(f.filter(cycle(matched), req(tokens), [EMPTY, HALF, FULLISH, UNKNOWN])) == expected


def test_falls_back_to_all_when_none_fits() -> None:
    f = KvHeadroomFilter("k")
    assert list(f.filter(cycle(), req(40000), [EMPTY, HALF])) == [EMPTY, HALF]


def test_prompt_text_estimate_and_reason() -> None:
    f = KvHeadroomFilter("k", KvHeadroomParams(0.0))
    assert list(f.filter(cycle(), req(0, "x" * 4 * 1700), [EMPTY, FULLISH])) == [EMPTY]
    assert f.reason(cycle(), req(1700), FULLISH) == "KV headroom 100 free blocks < 107 needed"


def test_parameters() -> None:
    assert factory("k", {"reserveFraction": 0.1}, PluginHandle()).params == KvHeadroomParams(0.1)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="reserveFraction"):
        factory("k", {"reserveFraction": 1.0}, PluginHandle())
