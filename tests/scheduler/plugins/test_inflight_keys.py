"""InflightTracker's keyed counts: requests in flight per (prefix key, primary endpoint), against a plain
model of the contract (``prefix-affinity-scorer``'s burst rule reads them)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from plugin_builders import FakeClock

from scheduler.plugins.shared.inflight import InflightTracker

ADDRS = ("a:1", "b:1", "c:1")


def test_counts_follow_dispatch_move_complete_and_are_idempotent() -> None:
    clock = FakeClock()
    t = InflightTracker(clock, timeout=10.0)
    t.dispatch("r1", ["a:1"], key=7)
    t.dispatch("r1", ["b:1"], key=7)  # a second dispatch of the same id is ignored
    t.dispatch("r2", ["a:1"], key=7)
    t.dispatch("r3", ["a:1"], key=8)
    t.dispatch("r4", ["a:1"])  # not keyed: counted per endpoint only
    assert t.key_counts == {(7, "a:1"): 2, (8, "a:1"): 1}
    assert t.request_counts == {"a:1": 4}
    t.move("r2", "b:1")  # a fallback served it
    assert t.key_counts == {(7, "a:1"): 1, (7, "b:1"): 1, (8, "a:1"): 1}
    assert t.complete("r2") and not t.complete("r2")
    assert t.key_counts == {(7, "a:1"): 1, (8, "a:1"): 1}
    t.forget({"a:1"})
    assert t.key_counts == {} and t.request_counts == {}
    t.move("r1", "c:1")  # its endpoint left: nothing to move
    assert t.complete("r1") and t.key_counts == {} and t.request_counts == {}


def test_keyed_counts_follow_the_primary_in_pd() -> None:
    t = InflightTracker(FakeClock(), timeout=10.0)
    t.dispatch("r", ["d:1", "p:1"], key=3)  # decode (primary) and prefill
    assert t.key_counts == {(3, "d:1"): 1}
    t.move("r", "p:1")  # the prefill endpoint served: the primary count is dropped, the key follows
    assert t.key_counts == {(3, "p:1"): 1} and t.request_counts == {"p:1": 1}
    t.complete("r")
    assert t.key_counts == {} and t.request_counts == {}
    t.dispatch("s", ["d:1", "p:1"], key=4)
    t.forget({"p:1"})  # the prefill endpoint left: the key stays on the primary
    assert t.key_counts == {(4, "d:1"): 1}
    t.complete("s")
    assert t.key_counts == {}


def test_lost_completions_expire_after_the_timeout() -> None:
    clock = FakeClock()
    t = InflightTracker(clock, timeout=5.0)
    t.dispatch("r1", ["a:1"], key=1)
    clock.now = 4.0
    t.dispatch("r2", ["a:1"], key=1)
    clock.now = 5.5  # r1's deadline passed: dropped on the next dispatch
    t.dispatch("r3", ["b:1"], key=2)
    assert t.key_counts == {(1, "a:1"): 1, (2, "b:1"): 1} and len(t) == 2


ops = st.lists(
    st.tuples(
        st.sampled_from(["dispatch", "complete", "move", "forget", "tick"]),
        st.integers(min_value=0, max_value=12),  # request id
        st.integers(min_value=0, max_value=3),  # prefix key
        st.sampled_from(ADDRS),
    ),
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_matches_a_model_and_never_drifts(steps: list[tuple[str, int, int, str]]) -> None:
    clock = FakeClock()
    t = InflightTracker(clock, timeout=3.0)
    # request id -> (key, address or None once its endpoint left, deadline)
    model: dict[str, tuple[int, str | None, float]] = {}
    for op, rid_n, key, address in steps:
        rid = f"r{rid_n}"
        if op == "dispatch":
            for r in [r for r, (_, _, d) in model.items() if d <= clock.now]:
                del model[r]
            model.setdefault(rid, (key, address, clock.now + 3.0))
            t.dispatch(rid, [address], key=key)
        elif op == "complete":
            assert t.complete(rid) == (model.pop(rid, None) is not None)
        elif op == "move":
            if rid in model and model[rid][1] is not None:
                k, _, d = model[rid]
                model[rid] = (k, address, d)
            t.move(rid, address)
        elif op == "forget":
            model = {r: (k, None if a == address else a, d) for r, (k, a, d) in model.items()}
            t.forget({address})
        else:
            clock.now += 1.0
        expected: dict[tuple[int, str], int] = {}
        for k, a, _ in model.values():
            if a is not None:
                expected[(k, a)] = expected.get((k, a), 0) + 1
        assert t.key_counts == expected
        assert sum(t.request_counts.values()) == sum(1 for _, a, _ in model.values() if a is not None)
        assert len(t) == len(model)
