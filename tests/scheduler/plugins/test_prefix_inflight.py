"""PrefixInflight: requests in flight per (prefix, endpoint), against a plain model of the contract."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.plugins.prefix.inflight import PrefixInflight

ADDRS = ("a:1", "b:1", "c:1")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_counts_follow_dispatch_move_complete_and_are_idempotent() -> None:
    clock = Clock()
    pin = PrefixInflight(clock, timeout=10.0)
    pin.dispatch("r1", 7, "a:1")
    pin.dispatch("r1", 7, "b:1")  # a second dispatch of the same id is ignored
    pin.dispatch("r2", 7, "a:1")
    pin.dispatch("r3", 8, "a:1")
    assert pin.counts == {(7, "a:1"): 2, (8, "a:1"): 1}
    pin.move("r2", "b:1")  # a fallback served it
    assert pin.counts == {(7, "a:1"): 1, (7, "b:1"): 1, (8, "a:1"): 1}
    assert pin.complete("r2") and not pin.complete("r2")
    assert pin.counts == {(7, "a:1"): 1, (8, "a:1"): 1}
    pin.forget({"a:1"})
    assert pin.counts == {} and len(pin) == 0


def test_lost_completions_expire_after_the_timeout() -> None:
    clock = Clock()
    pin = PrefixInflight(clock, timeout=5.0)
    pin.dispatch("r1", 1, "a:1")
    clock.t = 4.0
    pin.dispatch("r2", 1, "a:1")
    clock.t = 5.5  # r1's deadline passed: dropped on the next dispatch
    pin.dispatch("r3", 2, "b:1")
    assert pin.counts == {(1, "a:1"): 1, (2, "b:1"): 1} and len(pin) == 2


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
    clock = Clock()
    pin = PrefixInflight(clock, timeout=3.0)
    model: dict[str, tuple[int, str, float]] = {}
    for op, rid_n, key, address in steps:
        rid = f"r{rid_n}"
        if op == "dispatch":
            for r in [r for r, (_, _, d) in model.items() if d <= clock.t]:
                del model[r]
            model.setdefault(rid, (key, address, clock.t + 3.0))
            pin.dispatch(rid, key, address)
        elif op == "complete":
            assert pin.complete(rid) == (model.pop(rid, None) is not None)
        elif op == "move":
            if rid in model:
                k, _, d = model[rid]
                model[rid] = (k, address, d)
            pin.move(rid, address)
        elif op == "forget":
            model = {r: v for r, v in model.items() if v[1] != address}
            pin.forget({address})
        else:
            clock.t += 1.0
        expected: dict[tuple[int, str], int] = {}
        for k, a, _ in model.values():
            expected[(k, a)] = expected.get((k, a), 0) + 1
        assert pin.counts == expected
        assert len(pin) == len(model)
