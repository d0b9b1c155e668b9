"""Leader election under a failing Lease API: calls bounded, leadership given up in time, one cancel stops.

The safety property asserted throughout: a replica stops leading before ``lease_duration`` has passed
since the last renewal the API applied (after that another replica may take the Lease over). Timings
are the issue's: lease 1.5 s, renew deadline 1.0 s (retry 0.1 s), on the real clock; the clock-jump
tests add a jump to the monotonic clock the elector is given (a suspended process or VM).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import time
from dataclasses import replace

from fakekube import objects, running_fake_kube
from grpc_health.v1 import health_pb2
from testutil import eventually as until

from epp.kubernetes.leader import KubernetesLeaseApi, LeaderElector, LeaseConflict, LeaseRecord, campaign
from epp.server.health import HealthStatus

LEASE, RENEW, RETRY = 1.5, 1.0, 0.1
TIMING = {"lease_duration_s": LEASE, "renew_deadline_s": RENEW, "retry_period_s": RETRY}


class JumpClock:
    """The monotonic clock plus an offset a test can jump forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class FlakyLeases:
    """One in-memory Lease (409 on stale writes) whose calls can hang, answer slowly or jump a clock.

    ``applied_at``: real monotonic time of the last write applied; ``cancelled``: calls cancelled while
    waiting; ``pending``: calls in progress. ``unblock()`` ends every hang (test cleanup).
    """

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self._versions = itertools.count(1)
        self.hang = False
        self.delay = 0.0
        self.jump: tuple[JumpClock, float] | None = None  # applied once, during the next write
        self.applied_at = 0.0
        self.cancelled = 0
        self.pending = 0
        self._unblocked = asyncio.Event()

    def unblock(self) -> None:
        self.hang = False
        self._unblocked.set()

    async def _wait(self) -> None:
        self.pending += 1
        try:
            if self.hang:
                await self._unblocked.wait()
            elif self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.pending -= 1

    def _write(self, record: LeaseRecord) -> LeaseRecord:
        if self.jump is not None:
            clock, seconds = self.jump
            clock.offset += seconds
            self.jump = None
        self.record = replace(record, resource_version=str(next(self._versions)))
        self.applied_at = time.monotonic()
        return self.record

    async def get(self) -> LeaseRecord | None:
        await self._wait()
        return self.record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        await self._wait()
        if self.record is not None:
            raise LeaseConflict("exists")
        return self._write(record)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        await self._wait()
        if self.record is None or record.resource_version != self.record.resource_version:
            raise LeaseConflict("stale")
        return self._write(record)


class Events:
    """on_started / on_stopped callbacks recording ``("+" | "-", real monotonic time)``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.seen]

    def stopped_at(self) -> float:
        return next(t for kind, t in reversed(self.seen) if kind == "-")

    def callbacks(self) -> dict[str, object]:
        return {
            "on_started_leading": lambda: self.seen.append(("+", time.monotonic())),
            "on_stopped_leading": lambda: self.seen.append(("-", time.monotonic())),
        }


def elector(api: object, events: Events, clock: JumpClock | None = None) -> LeaderElector:
    extra = {"monotonic": clock} if clock is not None else {}
    return LeaderElector(api, "a", **TIMING, **events.callbacks(), **extra)  # type: ignore[arg-type]


async def stop(task: asyncio.Task[None], api: FlakyLeases | None = None) -> None:
    """Cleanup that also ends a run() the code under test failed to stop (unblock, cancel again)."""
    if api is not None:
        api.unblock()
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)


async def test_hanging_api_gives_leadership_up_before_the_lease_expires() -> None:
    api, events = FlakyLeases(), Events()
    el = elector(api, events)
    task = asyncio.create_task(el.run())
    try:
        await until(lambda: el.is_leader)
        await asyncio.sleep(0.3)  # a few renewals
        api.hang = True
        await until(lambda: not el.is_leader, timeout=4.0, what="stepping down while the API hangs")
        assert events.stopped_at() < api.applied_at + LEASE  # never two leaders
        assert api.cancelled >= 1  # the hanging call was abandoned, not left running
        await asyncio.sleep(LEASE)
        assert events.kinds() == ["+", "-"]  # no leadership without a renewal
    finally:
        await stop(task, api)


async def test_api_answering_past_the_deadline_gives_leadership_up() -> None:
    api, events = FlakyLeases(), Events()
    el = elector(api, events)
    task = asyncio.create_task(el.run())
    try:
        await until(lambda: el.is_leader)
        api.delay = 0.8  # a get + update round takes 1.6 s: longer than the lease itself
        await until(lambda: not el.is_leader, timeout=4.0, what="stepping down on a slow API")
        assert events.stopped_at() < api.applied_at + LEASE
        assert api.cancelled >= 1
        await asyncio.sleep(2 * LEASE)
        assert events.kinds() == ["+", "-"]  # rounds past the deadline never count as renewals
    finally:
        await stop(task, api)


async def test_api_answering_slowly_within_the_deadline_keeps_the_leader() -> None:
    api, events = FlakyLeases(), Events()
    el = elector(api, events)
    task = asyncio.create_task(el.run())
    try:
        await until(lambda: el.is_leader)
        api.delay = 0.15  # a round takes 0.3 s of the 1.0 s renew deadline
        await asyncio.sleep(2.5)
        assert events.kinds() == ["+"] and el.is_leader
        assert api.cancelled == 0
    finally:
        await stop(task, api)


async def test_clock_jump_between_renewals_gives_leadership_up_at_once() -> None:
    api, events, clock = FlakyLeases(), Events(), JumpClock()
    el = elector(api, events, clock)
    task = asyncio.create_task(el.run())
    try:
        await until(lambda: el.is_leader)
        clock.offset += 5 * LEASE  # the process was suspended: its lease may have been taken meanwhile
        await until(lambda: len(events.seen) >= 3, what="stepping down, then campaigning again")
        assert events.kinds()[:3] == ["+", "-", "+"]
    finally:
        await stop(task, api)


async def test_renewal_answered_after_a_clock_jump_is_not_a_proof() -> None:
    api, events, clock = FlakyLeases(), Events(), JumpClock()
    el = elector(api, events, clock)
    task = asyncio.create_task(el.run())
    try:
        await until(lambda: el.is_leader)
        api.jump = (clock, 5 * LEASE)  # the next write "takes" 7.5 s on the elector's clock
        await until(lambda: len(events.seen) >= 3, what="stepping down, then campaigning again")
        assert events.kinds()[:3] == ["+", "-", "+"]
    finally:
        await stop(task, api)


async def test_wall_clock_jumps_change_nothing() -> None:
    """Only renewTime carries the wall clock; nobody decides by it (other nodes' clocks are not trusted)."""
    api, events = FlakyLeases(), Events()
    jumps = itertools.cycle([dt.timedelta(days=-400), dt.timedelta(days=3), dt.timedelta(0)])
    a = LeaderElector(
        api, "a", **TIMING, **events.callbacks(), wall=lambda: dt.datetime.now(dt.UTC) + next(jumps)
    )  # type: ignore[arg-type]
    b = LeaderElector(api, "b", **TIMING)  # type: ignore[arg-type]
    tasks = [asyncio.create_task(a.run())]
    try:
        await until(lambda: a.is_leader)
        tasks.append(asyncio.create_task(b.run()))
        await asyncio.sleep(2 * LEASE)
        assert events.kinds() == ["+"] and not b.is_leader
    finally:
        for task in tasks:
            await stop(task, api)


async def test_one_cancel_stops_the_leader_during_a_hanging_call() -> None:
    api, events = FlakyLeases(), Events()
    el = elector(api, events)
    task = asyncio.create_task(el.run())
    try:
        await until(lambda: el.is_leader)
        api.hang = True
        await until(lambda: api.pending > 0)
        task.cancel()  # once: the release it attempts must be bounded too
        done, _ = await asyncio.wait({task}, timeout=RENEW + 1.0)
        assert task in done, "a single cancel did not stop leader election"
        assert task.cancelled()
        assert events.kinds() == ["+", "-"]
    finally:
        await stop(task, api)


async def test_readiness_drops_when_the_lease_api_hangs() -> None:
    api = FlakyLeases()
    health = HealthStatus(leader_election=True)
    await health.start()
    await health.set_synced(True)
    ready_until: list[float] = []

    def ready() -> bool:
        serving = health.status("readiness") == health_pb2.HealthCheckResponse.SERVING
        if serving:
            ready_until[:] = [time.monotonic()]
        return serving

    task = asyncio.create_task(campaign(api, "a", health, **TIMING))
    try:
        await until(ready)
        api.hang = True
        await until(lambda: not ready(), timeout=4.0, what="readiness dropped while the API hangs")
        assert ready_until[0] < api.applied_at + LEASE
    finally:
        await stop(task, api)


async def test_kubernetes_lease_api_that_stops_answering() -> None:
    """The real kubernetes-asyncio client (no timeout of its own) against a stalled API server."""
    async with running_fake_kube() as (server, client):
        server.store.register(*objects.LEASES)
        events = Events()
        el = elector(KubernetesLeaseApi(client, "ns", "pool-lease"), events)
        task = asyncio.create_task(el.run())
        try:
            await until(lambda: el.is_leader)
            await asyncio.sleep(0.3)
            server.stall()
            await until(lambda: not el.is_leader, timeout=4.0, what="stepping down on a stalled API server")
            writes = [t for t, method, _, code in server.answered if method in ("PUT", "POST") and code < 300]
            assert events.stopped_at() < writes[-1] + LEASE
            task.cancel()  # once, while calls hang
            done, _ = await asyncio.wait({task}, timeout=RENEW + 1.0)
            assert task in done, "a single cancel did not stop leader election"
        finally:
            server.resume()
            await stop(task)
