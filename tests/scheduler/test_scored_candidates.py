"""ScoredCandidates (the picker's view of a profile run's candidates) behaves as the tuple of
ScoredEndpoint it replaced, and max-score-picker picks the same from it as from a plain list."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cycle_state import CycleState
from scheduler.plugins.pickers.common import PickerParams
from scheduler.plugins.pickers.max_score import MaxScorePicker
from scheduler.types import Endpoint, LLMRequest, ScoredCandidates, ScoredEndpoint

EPS = tuple(Endpoint(f"10.0.0.{i}:8000") for i in range(6))
REQ = LLMRequest("r", "m", "m")


def test_behaves_as_the_tuple_of_scored_endpoints() -> None:
    totals = (0.5, 1.0, 0.0, 1.0, 0.25, 0.75)
    plain = tuple(map(ScoredEndpoint, EPS, totals))
    lazy = ScoredCandidates(EPS, totals)
    picked = lazy[3]
    assert picked == plain[3] and lazy[3] is picked  # built once, then the same object
    assert len(lazy) == 6 and tuple(lazy) == plain and list(lazy) == list(plain)
    assert tuple(lazy)[3] is picked and lazy[1:3] == plain[1:3] and lazy[-1] == plain[-1]
    assert lazy == plain and plain == lazy
    assert lazy == ScoredCandidates(EPS, totals) and lazy != ScoredCandidates(EPS, (0.0,) * 6)
    assert lazy != list(plain)  # as a tuple: not equal to a list
    assert plain[2] in lazy and lazy.index(plain[4]) == 4 and repr(lazy) == repr(plain)
    with pytest.raises(IndexError):
        lazy[6]


def test_hashes_as_the_tuple() -> None:
    names = ("a:1", "b:1")  # hashable stand-ins (an Endpoint's label map is not hashable)
    lazy = ScoredCandidates(names, (1.0, 0.5))  # type: ignore[arg-type]
    assert hash(lazy) == hash((ScoredEndpoint("a:1", 1.0), ScoredEndpoint("b:1", 0.5)))  # type: ignore[arg-type]


def test_endpoints_and_totals_must_align() -> None:
    with pytest.raises(ValueError, match="6 endpoints but 2 totals"):
        ScoredCandidates(EPS, (1.0, 0.0))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0, 13.5]), min_size=1, max_size=6),
    st.integers(min_value=0, max_value=2**32),
    st.integers(min_value=1, max_value=3),
)
def test_max_score_picks_the_same_from_the_totals_as_from_a_list(
    totals: list[float], seed: int, limit: int
) -> None:
    eps = EPS[: len(totals)]
    fast = MaxScorePicker("p", PickerParams(limit), random.Random(seed))
    plain = MaxScorePicker("p", PickerParams(limit), random.Random(seed))
    for _ in range(3):  # the random source advances the same way
        got = fast.pick(CycleState(), REQ, ScoredCandidates(eps, tuple(totals)))
        expected = plain.pick(CycleState(), REQ, list(map(ScoredEndpoint, eps, totals)))
        assert list(got) == list(expected)
