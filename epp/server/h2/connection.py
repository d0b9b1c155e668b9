"""One HTTP/2 connection serving ext_proc ``Process`` streams: the asyncio adapter of the protocol core.

Why: grpc.aio costs several wake-ups per message (a completion-queue thread hands every event to the
loop). Here one ``data_received`` hands every byte of the socket read to the sans-I/O
:class:`~epp.server.h2.core.H2Core`, which parses every frame, runs each stream's
:class:`~epp.server.stream.ExtProcStream` inline and returns all answers for one ``transport.write``.

What the adapter adds to the core (all the I/O, time and concurrency of the engine):

* the transport: the core's bytes are written unless the transport is closing; after
  :class:`~epp.server.h2.events.ConnectionClosed` the transport is closed; ``connection_lost`` ends the
  open streams;
* the clock: ``loop.time()`` of each read is passed in (flood-bucket refill, idle tracking); without a
  running loop (driven by hand in unit tests) ``now`` is 0.0 and no timer is armed;
* timers: the settings timeout (``--grpc-h2-settings-timeout``), the idle timeout (re-armed as
  :meth:`~epp.server.h2.core.H2Core.idle_check` says) and each stream's ``grpc-timeout``
  (:class:`~epp.server.h2.events.DeadlineSet` / ``DeadlineCleared``);
* tasks: a :class:`~epp.server.h2.events.Suspended` stream's ``settle()`` is awaited in a task (held
  strongly until done) and its answers go back through ``H2Core.settled``;
* write backpressure: ``pause_writing`` pauses reading until ``resume_writing`` (the transport's buffer
  limit is ``--grpc-h2-write-buffer``), so a peer that does not read cannot make us queue without end.
"""

from __future__ import annotations

import asyncio
from typing import cast

import structlog
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingResponse

from epp.server.h2 import frames as f
from epp.server.h2.core import H2Core
from epp.server.h2.events import ConnectionClosed, DeadlineCleared, DeadlineSet, ExtProcHandler, Suspended
from epp.server.h2.limits import H2Limits
from epp.server.health import HealthStatus
from epp.server.stream import StreamCore

__all__ = ["H2Connection", "TimedProtocol"]

_log = structlog.get_logger("epp.h2")


class TimedProtocol(asyncio.Protocol):
    """What both HTTP/2 engines' connections share (this one and
    :class:`~epp.server.ngh2.connection.NgH2Connection`): the settings / idle timers and the per-stream
    ``grpc-timeout`` deadlines, cancelled together when the connection goes, and write backpressure
    (reading pauses while the peer does not read, which bounds what is queued for it)."""

    _transport: asyncio.Transport | None
    _on_close: object

    def __init__(self) -> None:
        self._transport = None
        self._timers: list[asyncio.TimerHandle] = []  # settings and idle checks
        self._deadlines: dict[int, asyncio.TimerHandle] = {}  # grpc-timeout, by stream id

    def _gone(self) -> None:
        """The connection is lost: cancel every timer, drop the transport, tell the server."""
        for timer in self._timers:
            timer.cancel()
        for timer in self._deadlines.values():
            timer.cancel()
        self._deadlines.clear()
        self._transport = None
        if callable(self._on_close):
            self._on_close(self)

    def pause_writing(self) -> None:
        """The peer does not read: stop reading until it does (bounds what we queue for it)."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()


class H2Connection(TimedProtocol):
    def __init__(
        self,
        core: StreamCore,
        max_message_bytes: int,
        on_close: object = None,
        *,
        max_send_bytes: int = 0,
        limits: H2Limits | None = None,
        health: HealthStatus | None = None,
    ) -> None:
        """``health``: also serve grpc.health.v1 (``--health-checking``); None: UNIMPLEMENTED."""
        super().__init__()
        self._core = core
        self._on_close = on_close
        self._limits = limits = limits or H2Limits()
        self._h2 = H2Core(
            core.open, max_message_bytes, max_send_bytes=max_send_bytes, limits=limits, health=health
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # running settle() steps (strong references)

    @property
    def open_streams(self) -> int:
        return self._h2.open_streams

    @property
    def held_bytes(self) -> int:
        """Bytes counted against the memory budget now (partial messages and queued answers)."""
        return self._h2.held_bytes

    @property
    def shutting_down(self) -> bool:
        return self._h2.shutting_down

    # -- asyncio protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        lim = self._limits
        now = 0.0
        try:
            self._loop = loop = asyncio.get_running_loop()
        except RuntimeError:  # driven by hand (unit tests): no timers
            self._loop = None
        else:
            now = loop.time()
            self._timers.append(loop.call_later(lim.settings_timeout, self._check_settings))
            if lim.idle_timeout:
                self._timers.append(loop.call_later(lim.idle_timeout, self._check_idle))
            self._transport.set_write_buffer_limits(high=lim.write_buffer)
        self._transport.write(self._h2.initiate(now))

    def connection_lost(self, exc: Exception | None) -> None:
        self._h2.connection_lost()
        self._gone()

    def data_received(self, data: bytes) -> None:
        h2, loop = self._h2, self._loop
        out = h2.receive_data(data, 0.0 if loop is None else loop.time())
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            transport.write(out)
        if h2.events:
            self._apply()

    def _send(self, out: bytes) -> None:
        """Write what a call into the core returned, then act on its events."""
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            transport.write(out)
        if self._h2.events:
            self._apply()

    def _apply(self) -> None:
        """Act on the core's events (see :mod:`epp.server.h2.events`)."""
        events, self._h2.events = self._h2.events, []
        loop = self._loop
        for event in events:
            if type(event) is DeadlineSet:
                if loop is not None:
                    sid = event.stream_id
                    self._deadlines[sid] = loop.call_later(event.seconds, self._expire, sid)
            elif type(event) is DeadlineCleared:
                timer = self._deadlines.pop(event.stream_id, None)
                if timer is not None:
                    timer.cancel()
            elif type(event) is Suspended:
                task = asyncio.get_running_loop().create_task(self._settle(event.stream_id, event.ext))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif type(event) is ConnectionClosed and self._transport is not None:
                self._transport.close()

    def _check_settings(self) -> None:
        if self._transport is not None and self._h2.settings_pending:
            _log.warning("HTTP/2 connection error", error="SETTINGS not received or not acknowledged in time")
            self._send(self._h2.close(f.ErrorCode.SETTINGS_TIMEOUT, "settings timeout"))

    def _check_idle(self) -> None:
        if self._transport is None or self._loop is None:
            return
        idle = self._limits.idle_timeout
        again = self._h2.idle_check(self._loop.time(), idle)
        if again:
            self._timers.append(self._loop.call_later(again, self._check_idle))
            del self._timers[:-3]  # fired handles need no cancelling
        else:
            self._send(self._h2.close(f.ErrorCode.NO_ERROR, "idle"))

    def _expire(self, sid: int) -> None:
        """Stream ``sid``'s ``grpc-timeout`` passed."""
        self._deadlines.pop(sid, None)
        self._send(self._h2.expire(sid))

    async def _settle(self, sid: int, ext: ExtProcHandler) -> None:
        """Await a suspended stream's waits, then let the core send its answers and go on."""
        responses: list[ProcessingResponse] | None
        try:
            responses = await ext.settle()
        except Exception:
            _log.exception("ext_proc pre-scheduling step failed")
            responses = None
        if self._transport is not None:  # else the connection ended meanwhile
            self._send(self._h2.settled(sid, responses))

    # -- shutdown ----------------------------------------------------------------------------------

    def goaway(self) -> None:
        """Tell the peer no new stream will be accepted (streams already open continue)."""
        if self._transport is not None:
            self._send(self._h2.goaway())

    def abort_all(self) -> None:
        """End every open stream with outcome SHUTDOWN and close the connection."""
        self._send(self._h2.abort_all())
        if self._transport is not None:
            self._transport.close()
