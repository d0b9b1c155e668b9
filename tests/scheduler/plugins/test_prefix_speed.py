"""Endpoint speeds (decode time per token) and decayed dispatch shares of prefix-affinity-scorer."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.plugins.prefix.speed import DispatchShares, EndpointSpeeds, decode_seconds_per_token
from scheduler.types import Completion, Outcome, Usage


def done(decode: float, tokens: int = 0, chunks: int = 0, outcome: Outcome = Outcome.OK) -> Completion:
    return Completion(
        outcome, 200, usage=Usage(completion_tokens=tokens), output_chunks=chunks, decode_seconds=decode
    )


def test_decode_seconds_per_token_uses_the_tokens_after_the_first() -> None:
    assert decode_seconds_per_token(done(0.15, tokens=16)) == pytest.approx(0.01)
    assert decode_seconds_per_token(done(0.2, chunks=5)) == pytest.approx(0.05)  # no usage: chunks
    assert decode_seconds_per_token(done(0.0, tokens=16)) is None  # not streamed
    assert decode_seconds_per_token(done(0.1, tokens=1)) is None  # one token: no gap
    assert decode_seconds_per_token(done(0.1, tokens=16, outcome=Outcome.CLIENT_CANCEL)) is None


def test_an_endpoint_at_most_the_ratio_of_the_fastest_is_slow() -> None:
    speeds = EndpointSpeeds(0.65, window=8)  # two samples per endpoint are enough
    speeds.sample("a", 0.010)
    speeds.sample("b", 0.021)
    assert speeds.slow == frozenset()  # one sample each: not yet
    speeds.sample("a", 0.010)
    assert speeds.slow == frozenset()  # only one endpoint measured: nothing to compare with
    speeds.sample("b", 0.019)
    assert speeds.speeds == {"a": 1.0, "b": pytest.approx(0.5)}
    assert speeds.slow == {"b"}
    for _ in range(8):  # the window rolls: b is as fast as a now
        speeds.sample("b", 0.011)
    assert speeds.slow == frozenset() and speeds.speeds["b"] == pytest.approx(10 / 11)
    speeds.sample("c", 0.030)
    speeds.sample("c", 0.030)
    assert speeds.slow == {"c"}
    speeds.forget(["c", "a"])
    assert speeds.slow == frozenset() and speeds.speeds == {"b": 1.0}


def test_the_threshold_is_inclusive_and_zero_turns_it_off() -> None:
    at = EndpointSpeeds(0.5, window=4)
    off = EndpointSpeeds(0.0, window=4)
    for s in (at, off):
        for _ in range(2):
            s.sample("a", 0.01)
            s.sample("b", 0.02)
    assert at.slow == {"b"} and off.slow == frozenset()


def test_nonsense_samples_are_ignored_and_bad_parameters_refused() -> None:
    speeds = EndpointSpeeds(0.65, window=4)
    for bad in (0.0, -1.0, math.inf, math.nan):
        speeds.sample("a", bad)
    assert speeds.dump()["decode_ms_per_token"] == {}
    with pytest.raises(ValueError, match="slow_ratio"):
        EndpointSpeeds(1.0)
    with pytest.raises(ValueError, match="window"):
        EndpointSpeeds(0.5, window=3)
    with pytest.raises(ValueError, match="half_life"):
        DispatchShares(0.0)


def test_memory_is_one_window_per_endpoint_and_bounded_keys() -> None:
    speeds = EndpointSpeeds(0.65, window=16)
    for i in range(10_000):
        speeds.sample("a", 0.01 + i * 1e-6)
    assert len(speeds._samples["a"]) == 16
    shares = DispatchShares(5.0, max_keys=64)
    for i in range(10_000):
        shares.dispatch("a", float(i) / 100, key=i % 500)
        if i % 7 == 0:
            shares.dispatch("a", float(i) / 100, key=-1)  # used often: never the oldest
    assert len(shares._keys) == 64 and shares.key_share(-1, "a") > 0.0


def test_dispatch_shares_decay_with_the_half_life() -> None:
    shares = DispatchShares(half_life=2.0)
    assert shares.share("a") == 0.0 and shares.shares() == {}
    shares.dispatch("a", 10.0)
    shares.dispatch("b", 12.0)  # a's dispatch is one half-life old: weight 1 against 2
    assert shares.share("a") == pytest.approx(1 / 3) and shares.share("b") == pytest.approx(2 / 3)
    shares.dispatch("a", 12.0, key=7)
    shares.dispatch("b", 12.0, key=7)
    assert shares.key_share(7, "a") == pytest.approx(2 / 7) and shares.key_share(8, "a") == 0.0
    shares.forget(["b"])
    assert shares.shares() == {"a": pytest.approx(1.0)} and shares.key_share(7, "b") == 0.0
    shares.forget(["a"])
    assert shares.share("a") == 0.0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from("abcd"), st.floats(min_value=0.0, max_value=400.0), st.sampled_from([None, 1, 2])
        ),
        min_size=1,
        max_size=60,
    )
)
def test_dispatch_shares_match_the_decayed_sum(events: list[tuple[str, float, int | None]]) -> None:
    half_life = 3.0
    shares = DispatchShares(half_life)
    now = 0.0
    log: list[tuple[str, float, int | None]] = []
    for address, gap, key in events:  # up to 133 half-lives between two dispatches: rescaling included
        now += gap
        shares.dispatch(address, now, key)
        log.append((address, now, key))

    def decayed(match: object) -> float:
        return sum(2.0 ** ((t - now) / half_life) for a, t, k in log if match == a or match == (k, a))

    total = sum(decayed(a) for a in "abcd")
    for address in "abcd":
        assert shares.share(address) == pytest.approx(decayed(address) / total, rel=1e-6, abs=1e-9)
        for key in (1, 2):
            want = decayed((key, address)) / total
            assert shares.key_share(key, address) == pytest.approx(want, rel=1e-6, abs=1e-9)
