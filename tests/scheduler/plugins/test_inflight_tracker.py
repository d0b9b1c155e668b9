import pytest
from plugin_builders import FakeClock

from scheduler.plugins.shared.inflight import InflightTracker, dispatch_targets
from scheduler.types import Endpoint, ProfileResult, SchedulingResult, ScoredEndpoint


def test_dispatch_complete_exactly_once() -> None:
    t = InflightTracker(FakeClock(), 60)
    t.dispatch("r1", ["a"], 10)
    t.dispatch("r1", ["a"], 10)  # duplicate dispatch ignored
    t.dispatch("r2", ["a", "b"], 5)
    assert (t.requests("a"), t.tokens("a"), t.requests("b"), t.tokens("b")) == (2, 15, 1, 5)
    assert t.complete("r1") is True
    assert t.complete("r1") is False  # completion reported twice
    assert (t.requests("a"), t.tokens("a")) == (1, 5)
    t.complete("r2")
    assert t.request_counts == {} and t.token_counts == {} and len(t) == 0


def test_add_tokens_and_unknown_ids() -> None:
    t = InflightTracker(FakeClock(), 60)
    t.dispatch("r", ["a"], 3)
    t.add_tokens("r", 4)
    t.add_tokens("unknown", 100)
    t.add_tokens("r", -2)  # ignored
    assert t.tokens("a") == 7
    t.complete("r")
    assert t.tokens("a") == 0


@pytest.mark.parametrize(
    ("dispatched", "served", "expected"),
    [
        (["a"], "b", {"b": 1}),
        (["a"], "a", {"a": 1}),
        (["a", "p"], "b", {"b": 1, "p": 1}),
        (["a", "p"], "p", {"p": 1}),  # served endpoint already counted: primary count dropped
        (["a"], "", {"a": 1}),
    ],
)
def test_move_to_served(dispatched: list[str], served: str, expected: dict[str, int]) -> None:
    t = InflightTracker(FakeClock(), 60)
    t.dispatch("r", dispatched, 8)
    t.move("r", served)
    assert t.request_counts == expected
    assert t.token_counts == dict.fromkeys(expected, 8)
    t.complete("r")
    assert t.request_counts == {} and t.token_counts == {}


def test_expiry_on_dispatch() -> None:
    clock = FakeClock()
    t = InflightTracker(clock, 10)
    t.dispatch("old", ["a"], 1)
    clock.now = 5
    t.dispatch("mid", ["a"], 1)
    clock.now = 11
    t.dispatch("new", ["b"], 1)
    assert t.request_counts == {"a": 1, "b": 1}
    assert t.complete("old") is False and t.complete("mid") is True


def test_forget_removed_endpoints() -> None:
    t = InflightTracker(FakeClock(), 60)
    t.dispatch("r", ["a", "b"], 2)
    t.forget({"a"})
    assert t.request_counts == {"b": 1}
    t.move("r", "c")
    t.complete("r")
    assert t.request_counts == {}


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        InflightTracker(FakeClock(), 0)


def _result() -> SchedulingResult:
    d, d2, p, s = Endpoint("d:1"), Endpoint("d2:1"), Endpoint("p:1"), Endpoint("s:1")
    return SchedulingResult(
        primary_profile="decode",
        endpoints=(d, d2),
        profile_results={
            "decode": ProfileResult("decode", (ScoredEndpoint(d, 1), ScoredEndpoint(d2, 0.5))),
            "prefill": ProfileResult("prefill", (ScoredEndpoint(p, 1),)),
            "shadow": ProfileResult("shadow", (ScoredEndpoint(s, 1),), shadow=True),
        },
    )


def test_dispatch_targets() -> None:
    assert dispatch_targets(_result(), every_profile=False) == ["d:1"]
    assert dispatch_targets(_result(), every_profile=True) == ["d:1", "p:1"]
