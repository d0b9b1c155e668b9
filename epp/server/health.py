"""grpc.health.v1 with the Go endpoint picker's semantics (GIE's Helm chart probes rely on them).

Without leader election every service name is answered the same way: SERVING once the endpoint set
is synced (the data layer applied its first complete listing), NOT_SERVING before. GIE's chart probes
the service ``inference-extension``; Envoy and load balancers ask for ``""`` or
``envoy.service.ext_proc.v3.ExternalProcessor``.

With leader election (:meth:`HealthStatus.set_leader` is the seam the elector drives):

* ``liveness``: SERVING (a standby must not be restarted for not leading);
* ``readiness``, ``""`` and ``envoy.service.ext_proc.v3.ExternalProcessor``: SERVING when synced and
  leading;
* any other name: SERVICE_UNKNOWN.

After :meth:`HealthStatus.shutting_down` every service is NOT_SERVING for good. ``Watch`` streams the
status of a service whenever it changes; ``List`` reports the known services.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = ["EXT_PROC_SERVICE", "LIVENESS", "READINESS", "HealthStatus"]

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS = "liveness"
READINESS = "readiness"
_LEADER_GATED = frozenset({"", READINESS, EXT_PROC_SERVICE})

_SERVING = int(health_pb2.HealthCheckResponse.SERVING)
_NOT_SERVING = int(health_pb2.HealthCheckResponse.NOT_SERVING)
_UNKNOWN = int(health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)


class HealthStatus:
    """The picker's health state: (synced, leader, stopping) -> a status per service name."""

    def __init__(self, *, leader_election: bool = False) -> None:
        self._leader_election = leader_election
        self._synced = False
        self._leader = not leader_election
        self._stopping = False
        self._changed = asyncio.Condition()
        self.servicer = _HealthServicer(self)

    @property
    def ready(self) -> bool:
        return self._synced and self._leader and not self._stopping

    def status(self, service: str) -> int:
        """The ServingStatus of ``service`` now."""
        if self._stopping:
            return _NOT_SERVING
        if not self._leader_election:
            return _SERVING if self._synced else _NOT_SERVING
        if service == LIVENESS:
            return _SERVING
        if service in _LEADER_GATED:
            return _SERVING if self.ready else _NOT_SERVING
        return _UNKNOWN

    def services(self) -> tuple[str, ...]:
        if self._leader_election:
            return (EXT_PROC_SERVICE, LIVENESS, READINESS)
        return (EXT_PROC_SERVICE,)

    async def start(self) -> None:
        """Nothing to publish: statuses are computed per call. Kept for a symmetric lifecycle."""
        await self._notify()

    async def set_synced(self, synced: bool) -> None:
        self._synced = synced
        await self._notify()

    async def set_leader(self, leader: bool) -> None:
        """Leader election changed; ignored (always leader) when leader election is off."""
        if self._leader_election:
            self._leader = leader
            await self._notify()

    async def shutting_down(self) -> None:
        """Every service NOT_SERVING, permanently."""
        self._stopping = True
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def watch(self, service: str) -> AsyncIterator[int]:
        """The status of ``service`` now and after every change (until the caller stops)."""
        last: int | None = None
        while True:
            current = self.status(service)
            if current != last:
                last = current
                yield current
            async with self._changed:
                await self._changed.wait()


class _HealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    def __init__(self, health: HealthStatus) -> None:
        self._health = health

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        return health_pb2.HealthCheckResponse(status=self._health.status(request.service))

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        statuses = {
            name: health_pb2.HealthCheckResponse(status=self._health.status(name))
            for name in self._health.services()
        }
        return health_pb2.HealthListResponse(statuses=statuses)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> None:
        async for status in self._health.watch(request.service):
            await context.write(health_pb2.HealthCheckResponse(status=status))
