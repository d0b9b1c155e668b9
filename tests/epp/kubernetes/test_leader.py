"""Leader election against an in-memory Lease API (fake clocks), then real-time failover."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import replace

import pytest
from testutil import eventually as _until

from epp.kubernetes.leader import LeaderElector, LeaseConflict, LeaseRecord


class MemoryLeaseApi:
    """One Lease with resourceVersion semantics (409 on stale writes), shared by all candidates."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.fail = False

    async def get(self) -> LeaseRecord | None:
        if self.fail:
            raise ConnectionError("api down")
        return self.record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        if self.record is not None:
            raise LeaseConflict("exists")
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        if self.fail:
            raise ConnectionError("api down")
        assert self.record is not None
        if record.resource_version != self.record.resource_version:
            raise LeaseConflict("stale")
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def wall() -> dt.datetime:
    return dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def elector(api: MemoryLeaseApi, ident: str, clock: Clock, **kw: object) -> LeaderElector:
    return LeaderElector(api, ident, monotonic=clock, wall=wall, **kw)  # type: ignore[arg-type]


async def test_first_candidate_acquires_and_others_wait_until_expiry() -> None:
    api, clock = MemoryLeaseApi(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert await a.try_acquire_or_renew()
    assert api.record is not None and api.record.holder == "a" and api.record.transitions == 0
    assert not await b.try_acquire_or_renew()
    clock.t += 10  # a keeps renewing: b observes changes and keeps waiting
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock.t += 14.9  # a died: no change observed for < lease duration
    assert not await b.try_acquire_or_renew()
    clock.t += 0.2  # now > lease duration since b last saw a change
    assert await b.try_acquire_or_renew()
    assert api.record.holder == "b" and api.record.transitions == 1


async def test_renewal_keeps_acquire_time_and_stale_writer_loses() -> None:
    api, clock = MemoryLeaseApi(), Clock()
    a = elector(api, "a", clock)
    assert await a.try_acquire_or_renew()
    first = api.record
    assert first is not None
    assert await a.try_acquire_or_renew()
    assert api.record is not None and api.record.acquire_time == first.acquire_time
    with pytest.raises(LeaseConflict):
        await api.update(replace(first, holder="x"))  # stale resourceVersion


async def test_released_lease_is_taken_at_once() -> None:
    api, clock = MemoryLeaseApi(), Clock()
    api.record = LeaseRecord(holder="", resource_version="7")
    b = elector(api, "b", clock)
    assert await b.try_acquire_or_renew()


@pytest.mark.parametrize("bad", [{"lease_duration_s": 5, "renew_deadline_s": 10}, {"retry_period_s": 0}])
def test_invalid_timings_rejected(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
        LeaderElector(MemoryLeaseApi(), "a", **bad)  # type: ignore[arg-type]


async def test_run_failover_on_release_and_on_api_failure() -> None:
    api = MemoryLeaseApi()
    events: list[str] = []
    # the order asserted below is the graceful hand-over: a stops leading, then frees the Lease, then b
    # acquires it (a lease long enough that b cannot take over by expiry first on a stalled loop)
    timing = {"lease_duration_s": 3.0, "renew_deadline_s": 0.6, "retry_period_s": 0.05}
    a = LeaderElector(api, "a", on_started_leading=lambda: events.append("a+"),
                      on_stopped_leading=lambda: events.append("a-"), **timing)  # fmt: skip
    b = LeaderElector(api, "b", on_started_leading=lambda: events.append("b+"),
                      on_stopped_leading=lambda: events.append("b-"), **timing)  # fmt: skip
    ta = asyncio.create_task(a.run())
    await _until(lambda: a.is_leader)
    tb = asyncio.create_task(b.run())
    await asyncio.sleep(0.2)
    assert not b.is_leader  # a renews; b stays standby
    ta.cancel()  # graceful shutdown releases the lease
    await asyncio.gather(ta, return_exceptions=True)
    await _until(lambda: b.is_leader, timeout=2.0)
    assert events[:3] == ["a+", "a-", "b+"]
    api.fail = True  # b cannot renew: it steps down after the renew deadline
    await _until(lambda: not b.is_leader, timeout=5.0)
    assert events[-1] == "b-"
    tb.cancel()
    await asyncio.gather(tb, return_exceptions=True)
