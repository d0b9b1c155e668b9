"""grpc.health.v1 status of the picker (served on ``--grpc-health-port``, optionally on the ext_proc port).

Services and when they are SERVING:

* ``liveness``: always, until shutdown starts.
* ``readiness``, ``""`` and ``envoy.service.ext_proc.v3.ExternalProcessor``: once the endpoint set is
  synced (the data layer reported its first complete view) and, with leader election, only while this
  replica is the leader (:meth:`HealthStatus.set_leader` is the seam the elector drives).

On shutdown every service turns NOT_SERVING for good (:meth:`HealthStatus.shutting_down`). Unknown
services answer NOT_FOUND (Check) / SERVICE_UNKNOWN (Watch), as the reference servicer does.
"""

from __future__ import annotations

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

__all__ = ["EXT_PROC_SERVICE", "LIVENESS", "READY_SERVICES", "HealthStatus"]

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS = "liveness"
READY_SERVICES = ("", "readiness", EXT_PROC_SERVICE)

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class HealthStatus:
    """Owns the aio health servicer and derives every service's status from (synced, leader)."""

    def __init__(self, *, leader_election: bool = False) -> None:
        self.servicer = HealthServicer()
        self._leader_election = leader_election
        self._synced = False
        self._leader = not leader_election
        self._stopping = False

    @property
    def ready(self) -> bool:
        return self._synced and self._leader and not self._stopping

    async def start(self) -> None:
        """Publish the initial statuses: live, not ready."""
        await self.servicer.set(LIVENESS, _SERVING)
        await self._publish()

    async def set_synced(self, synced: bool) -> None:
        self._synced = synced
        await self._publish()

    async def set_leader(self, leader: bool) -> None:
        """Leader election changed; ignored (always leader) when leader election is off."""
        if self._leader_election:
            self._leader = leader
            await self._publish()

    async def shutting_down(self) -> None:
        """Every service NOT_SERVING, permanently."""
        self._stopping = True
        await self.servicer.enter_graceful_shutdown()

    async def _publish(self) -> None:
        status = _SERVING if self.ready else _NOT_SERVING
        for service in READY_SERVICES:
            await self.servicer.set(service, status)
