"""Leader election drives readiness: only the Lease holder reports ready; a release hands over at once."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import replace

from grpc_health.v1 import health_pb2
from testutil import eventually as _until

from epp.kubernetes.leader import LeaseConflict, LeaseRecord, campaign
from epp.server.health import HealthStatus

FAST = {"lease_duration_s": 3.0, "renew_deadline_s": 2.0, "retry_period_s": 0.05}


class MemoryLeases:
    """An in-memory Lease with resourceVersion checks (what the API server enforces)."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self._versions = itertools.count(1)

    async def get(self) -> LeaseRecord | None:
        return self.record

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        if self.record is not None:
            raise LeaseConflict("exists")
        self.record = replace(record, resource_version=str(next(self._versions)))
        return self.record

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        if self.record is None or record.resource_version != self.record.resource_version:
            raise LeaseConflict("stale")
        self.record = replace(record, resource_version=str(next(self._versions)))
        return self.record


def _ready(health: HealthStatus) -> bool:
    return health.status("readiness") == health_pb2.HealthCheckResponse.SERVING


async def test_only_the_leader_is_ready_and_release_fails_over() -> None:
    leases = MemoryLeases()
    a, b = HealthStatus(leader_election=True), HealthStatus(leader_election=True)
    for h in (a, b):
        await h.start()
        await h.set_synced(True)
    task_a = asyncio.create_task(campaign(leases, "a", a, **FAST))
    await _until(lambda: _ready(a))
    task_b = asyncio.create_task(campaign(leases, "b", b, **FAST))
    await asyncio.sleep(0.2)
    assert _ready(a) and not _ready(b)
    task_a.cancel()  # shutdown of the leader: the Lease is released, b takes over without waiting
    with contextlib.suppress(asyncio.CancelledError):
        await task_a
    assert not _ready(a)
    await _until(lambda: _ready(b), timeout=1.0)
    task_b.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task_b
