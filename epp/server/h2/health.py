"""grpc.health.v1 on the ext_proc port of the HTTP/2 engine (``--health-checking``, as GIE's flag).

A stream whose ``:path`` is a ``grpc.health.v1.Health`` method is dispatched here once, at its HEADERS, when
the core was given a :class:`~epp.server.health.HealthStatus` (otherwise it is answered UNIMPLEMENTED like
any other method); ext_proc streams never pass through this module. The statuses are those the grpc.aio
engine serves on the ext_proc port (:meth:`HealthStatus.on_ext_proc_port`): only ``""`` and
``envoy.service.ext_proc.v3.ExternalProcessor`` are known there.

* ``Check`` (unary): the status; an unknown service ends with NOT_FOUND ``unknown service``, as grpc's
  health servicers answer;
* ``List`` (unary): the status of each known service;
* ``Watch`` (server streaming): the status now, then one message per change (an unknown service:
  SERVICE_UNKNOWN once); between changes the stream is SUSPENDED and its :class:`HealthCall` awaits
  :meth:`HealthStatus.changed` in the adapter's settle task. It ends when the client resets it, at its
  ``grpc-timeout`` (DEADLINE_EXCEEDED), or at shutdown: :meth:`HealthServing._end_watches` (called with the
  GOAWAY of a graceful stop) sends the last status (NOT_SERVING) and UNAVAILABLE ``the endpoint picker is
  shutting down``, so watches do not hold the grace period.

Bounds: a health call is a stream like any other, so watches count against
``--grpc-h2-max-concurrent-streams`` per connection; a waiting watch holds its stream, one future and one
task, and no buffer (the client's extra messages stay within its stream window, unread). A half-close
before the request message ends the call INTERNAL ``missing request message``.
"""

from __future__ import annotations

from typing import Any

from grpc_health.v1 import health_pb2

from epp.server.grpc_status import GRPC_INTERNAL, GRPC_NOT_FOUND, GRPC_UNAVAILABLE
from epp.server.h2.events import DeadlineSet, StreamError
from epp.server.h2.headers import CHECK, LIST, WATCH
from epp.server.h2.sender import _SUSPENDED, H2Stream, StreamSender
from epp.server.health import EXT_PROC_PORT_SERVICES, HealthStatus
from scheduler.types import Outcome

__all__ = ["HealthCall", "HealthServing"]

_UNKNOWN = int(health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
_Response = health_pb2.HealthCheckResponse
_DECODERS = {
    CHECK: health_pb2.HealthCheckRequest.FromString,
    WATCH: health_pb2.HealthCheckRequest.FromString,
    LIST: health_pb2.HealthListRequest.FromString,
}


class HealthCall:
    """One health call: the handler the core feeds (as :class:`~epp.server.h2.events.ExtProcHandler`)."""

    __slots__ = (
        "_ended", "_health", "_last", "_service", "_waiter", "finished", "method", "requested", "suspended"
    )  # fmt: skip

    def __init__(self, health: HealthStatus, method: int) -> None:
        self._health = health
        self.method = method
        self.requested = False  # the request message arrived
        self.finished = False  # Check / List answered
        self.suspended = False  # Watch: waits for the next change
        self._service = ""
        self._last = -1  # Watch: the status last sent
        self._waiter: Any = None  # Watch: the future settle() awaits
        self._ended = False

    def _status(self) -> int:
        status = self._health.on_ext_proc_port(self._service)
        return _UNKNOWN if status is None else status

    def feed(self, msg: Any) -> list[Any]:
        """The answer to the request message; raises StreamError (NOT_FOUND) for Check of an unknown
        service."""
        self.requested = True
        if self.method == LIST:
            self.finished = True
            statuses = {name: _Response(status=self._health.status(name)) for name in EXT_PROC_PORT_SERVICES}
            return [health_pb2.HealthListResponse(statuses=statuses)]
        self._service = msg.service
        if self.method == CHECK:
            status = self._health.on_ext_proc_port(self._service)
            if status is None:
                raise StreamError(GRPC_NOT_FOUND, "unknown service")
            self.finished = True
            return [_Response(status=status)]
        self._last = self._status()
        self.suspended = True
        return [_Response(status=self._last)]

    async def settle(self) -> list[Any]:
        """Watch: wait for a change of this service's status; the message for it ([] once ended)."""
        health = self._health
        while not self._ended:
            waiter = self._waiter = health.changed()
            try:
                await waiter
            finally:
                health.forget(waiter)
                self._waiter = None
            status = self._status()
            if not self._ended and status != self._last:
                self._last = status
                return [_Response(status=status)]
        return []

    def last(self) -> list[Any]:
        """Watch at shutdown: the status now if it was not sent yet."""
        status = self._status()
        if status == self._last:
            return []
        self._last = status
        return [_Response(status=status)]

    def end(self, outcome: Outcome, status: int = -1) -> None:
        """The stream ended: a waiting Watch stops waiting."""
        self._ended = True
        self.suspended = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class HealthServing(StreamSender):
    """The core's health calls (a mix-in of :class:`~epp.server.h2.core.H2Core`, which owns the state)."""

    _health: HealthStatus | None
    _peer_window: int
    _stream_window: int

    def _open_health(
        self, sid: int, method: int, timeout: float | None, end_stream: bool, out: list[bytes]
    ) -> None:
        """A new health call on stream ``sid`` (its HEADERS ended the header block)."""
        assert self._health is not None
        call = HealthCall(self._health, method)
        stream = self._streams[sid] = H2Stream(call, self._peer_window, self._stream_window)
        stream.decode = _DECODERS[method]
        stream.call = call
        if timeout is not None:
            stream.deadline = True
            self.events.append(DeadlineSet(sid, timeout))
        if end_stream:
            self._remote_end(sid, stream, out)

    def _call_half_closed(self, sid: int, stream: H2Stream, out: list[bytes]) -> None:
        call = stream.call
        assert isinstance(call, HealthCall)
        if not call.requested:
            self._fail(sid, stream, GRPC_INTERNAL, "missing request message", out)
        # else: a Watch goes on (Check and List ended with their answer)

    def _end_watches(self, out: list[bytes]) -> None:
        """Shutdown: every Watch sends its last status and ends UNAVAILABLE."""
        for sid, stream in list(self._streams.items()):
            call = stream.call
            if isinstance(call, HealthCall) and call.method == WATCH:
                if stream.state is _SUSPENDED:
                    self._queue(sid, stream, call.last(), out)
                reason = "the endpoint picker is shutting down"
                self._finish(sid, stream, GRPC_UNAVAILABLE, reason, _SHUTDOWN, out)


_SHUTDOWN = Outcome.SHUTDOWN
