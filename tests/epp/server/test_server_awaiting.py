"""AwaitingUsage: the bounded, expiring request-id map between routing and observability streams."""

from __future__ import annotations

import pytest

from epp.protocol import Observed
from epp.server.correlation import Awaited, AwaitingUsage


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_take_returns_the_entry_once() -> None:
    awaiting = AwaitingUsage(clock=FakeClock())
    awaiting.expect("r1", "m", "t", 5.0)
    assert awaiting.take("r1") == (Awaited("m", "t", 5.0), None)
    assert awaiting.take("r1") is None
    assert awaiting.take("other") is None


def test_entries_expire_after_the_ttl() -> None:
    clock = FakeClock()
    awaiting = AwaitingUsage(ttl_s=10.0, clock=clock)
    awaiting.expect("old", "m", "m", 0.0)
    clock.now += 5
    awaiting.expect("young", "m", "m", 0.0)
    clock.now += 6
    assert awaiting.take("old") is None
    assert awaiting.take("young") is not None
    assert awaiting.dropped == 1


def test_capacity_drops_the_oldest() -> None:
    awaiting = AwaitingUsage(capacity=3, clock=FakeClock())
    for i in range(5):
        awaiting.expect(f"r{i}", "m", "m", 0.0)
    assert len(awaiting) == 3 and awaiting.dropped == 2
    assert awaiting.take("r0") is None and awaiting.take("r1") is None
    assert awaiting.take("r4") is not None


def test_repeated_id_replaces_and_empty_id_is_ignored() -> None:
    clock = FakeClock()
    awaiting = AwaitingUsage(ttl_s=10.0, clock=clock)
    awaiting.expect("r", "m1", "m1", 0.0)
    clock.now += 8
    awaiting.expect("r", "m2", "m2", 1.0)
    awaiting.expect("", "m3", "m3", 0.0)
    clock.now += 8
    assert len(awaiting) == 1
    assert awaiting.take("r") == (Awaited("m2", "m2", 1.0), None)


@pytest.mark.parametrize(("capacity", "ttl"), [(0, 1.0), (1, 0.0), (-1, 5.0)])
def test_bad_bounds_are_refused(capacity: int, ttl: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        AwaitingUsage(capacity=capacity, ttl_s=ttl)


def test_deferred_finish_is_handed_out_by_take_or_called_with_none_when_dropped() -> None:
    clock = FakeClock()
    calls: list[tuple[str, Observed | None]] = []
    awaiting = AwaitingUsage(capacity=2, ttl_s=10.0, clock=clock)
    assert not awaiting.defer("nobody", lambda o: calls.append(("nobody", o)))
    for rid in ("a", "b"):
        awaiting.expect(rid, "m", "m", 0.0)
        assert awaiting.defer(rid, lambda o, rid=rid: calls.append((rid, o)))  # type: ignore[misc]
    assert not awaiting.defer("a", lambda o: None)  # one finish per entry
    found = awaiting.take("a")
    assert found is not None and found[1] is not None
    awaiting.expect("c", "m", "m", 0.0)
    awaiting.expect("d", "m", "m", 0.0)  # evicts b, whose finish runs with None
    assert calls == [("b", None)]
    awaiting.defer("c", lambda o: calls.append(("c", o)))
    clock.now += 11
    assert awaiting.take("d") is None  # c and d expired; c's finish ran
    assert calls == [("b", None), ("c", None)]
