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

On the ext_proc port (``--health-checking``, both engines) the service is GIE's there (grpc-go's standard
health server registered beside ext_proc): only ``""`` and ``envoy.service.ext_proc.v3.ExternalProcessor``
are known, with the statuses above (:meth:`HealthStatus.on_ext_proc_port`); ``Check`` of another name
fails with gRPC status NOT_FOUND, ``Watch`` of one sends SERVICE_UNKNOWN and stays open, as grpc's health
servicers do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = ["EXT_PROC_PORT_SERVICES", "EXT_PROC_SERVICE", "LIVENESS", "READINESS", "HealthStatus"]

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS = "liveness"
READINESS = "readiness"
_LEADER_GATED = frozenset({"", READINESS, EXT_PROC_SERVICE})
EXT_PROC_PORT_SERVICES = ("", EXT_PROC_SERVICE)
"""The services known on the ext_proc port (``--health-checking``)."""

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
        self._waiters: set[asyncio.Future[None]] = set()  # one per waiting Watch: bounded by the streams
        self.servicer = _HealthServicer(self)
        self.ext_proc_port_servicer = _HealthServicer(self, ext_proc_port=True)

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

    @property
    def stopping(self) -> bool:
        return self._stopping

    def on_ext_proc_port(self, service: str) -> int | None:
        """The ServingStatus of ``service`` on the ext_proc port now; None for a service unknown there."""
        return self.status(service) if service in EXT_PROC_PORT_SERVICES else None

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
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def changed(self) -> asyncio.Future[None]:
        """A future resolved at the next state change (or set by its owner); pass it to :meth:`forget`
        when done waiting, so an abandoned wait is not kept."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        return waiter

    def forget(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    async def watch(self, service: str, *, ext_proc_port: bool = False) -> AsyncIterator[int]:
        """The status of ``service`` now and after every change (until the caller stops); on the ext_proc
        port a service unknown there is SERVICE_UNKNOWN."""
        last: int | None = None
        while True:
            current = self.status(service) if not ext_proc_port else self.on_ext_proc_port(service)
            current = _UNKNOWN if current is None else current
            if current != last:
                last = current
                yield current
            waiter = self.changed()
            try:
                await waiter
            finally:
                self.forget(waiter)


class _HealthServicer(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """grpc.aio's health service: the health port's, or (``ext_proc_port``) the ext_proc port's."""

    def __init__(self, health: HealthStatus, *, ext_proc_port: bool = False) -> None:
        self._health = health
        self._port = ext_proc_port

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        if not self._port:
            return health_pb2.HealthCheckResponse(status=self._health.status(request.service))
        status = self._health.on_ext_proc_port(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return health_pb2.HealthCheckResponse(status=status)

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        names = EXT_PROC_PORT_SERVICES if self._port else self._health.services()
        statuses = {name: health_pb2.HealthCheckResponse(status=self._health.status(name)) for name in names}
        return health_pb2.HealthListResponse(statuses=statuses)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> None:
        async for status in self._health.watch(request.service, ext_proc_port=self._port):
            await context.write(health_pb2.HealthCheckResponse(status=status))
