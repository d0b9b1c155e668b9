"""One HTTP/2 connection serving ext_proc ``Process`` streams on ngh2 (libnghttp2), ``--grpc-engine=ngh2``.

The same contract as :class:`~epp.server.h2.connection.H2Connection` (an ``asyncio.Protocol`` that
:class:`~epp.server.h2.server.H2Server` makes per accepted socket, with ``open_streams``, ``goaway`` and
``abort_all``), with nghttp2 doing the framing, HPACK, stream states and its own defences (rapid reset,
glitches, CONTINUATION and ACK floods, header-list size) in C. Python keeps what nghttp2 has no notion of:
gRPC messages, the memory budget, the timers and the ext_proc streams.

Limits (:class:`~epp.server.h2.limits.H2Limits`, the ``--grpc-h2-*`` flags), as the h2 engine applies them:

* ``max_concurrent_streams``: advertised (SETTINGS_MAX_CONCURRENT_STREAMS) and enforced by nghttp2: a
  stream beyond it before our SETTINGS are acknowledged gets RST_STREAM REFUSED_STREAM, after it the
  connection ends with GOAWAY PROTOCOL_ERROR (nghttp2's rule; a client that respects the setting, as Envoy
  does, never meets either);
* ``stream_window`` / ``connection_budget``: manual flow control (``auto_window_update=False``): the
  connection window is the budget, each stream's initial window ``stream_window``; received bytes are
  acknowledged (``acknowledge_received_data``, nghttp2 then sends WINDOW_UPDATE) only as complete gRPC
  messages are consumed, or when their stream ends. So partial messages are bounded by the budget. A
  message larger than the stream window is granted its size (the stream window grows to it) if the budget
  holds it with the other streams' partial messages, queued answers and grants; otherwise the stream ends
  RESOURCE_EXHAUSTED. Answers are handed to nghttp2 only within the peer's windows; the rest waits here, and
  when partial messages plus waiting answers exceed the budget the stream ends RESOURCE_EXHAUSTED;
* ``max_header_list_size``: advertised and nghttp2's ``max_inbound_header_list_size``; nghttp2 accepts at most
  ``max(8, size / 16 KiB + 1)`` CONTINUATION frames per header block;
* ``flood_rate``: the h2 engine's token bucket (``flood_rate`` a second, a burst of as many, one token given
  back per complete message) charged for every PING, SETTINGS, WINDOW_UPDATE and RST_STREAM received: an
  empty bucket ends the connection with GOAWAY ENHANCE_YOUR_CALM. nghttp2's own limits are derived from it:
  at most ``flood_rate`` queued PING/SETTINGS ACKs (``max_outbound_ack``), its RST_STREAM bucket
  ``(10 x, 5 x flood_rate)`` and its glitch bucket ``(10 x, 1 x flood_rate)`` (empty DATA, frames on closed
  streams and other suspicious frames);
* ``settings_timeout``: the client's SETTINGS must arrive and ours be acknowledged in time, else GOAWAY
  SETTINGS_TIMEOUT; ``idle_timeout``: no open stream and nothing read for that long ends the connection
  (GOAWAY NO_ERROR);
* ``write_buffer``: the transport's high-water mark; above it reading pauses until the peer reads.

Per stream, as the h2 engine: ``grpc-timeout`` (DEADLINE_EXCEEDED, outcome TIMEOUT), a content-type other
than ``application/grpc`` -> HTTP 415, another ``:path`` -> UNIMPLEMENTED unless it is grpc.health.v1 and
health is served on this port (:class:`~epp.server.h2.health.HealthCall`, the h2 engine's), compressed
messages -> UNIMPLEMENTED, a message over ``max_message_bytes`` -> RESOURCE_EXHAUSTED, an answer over
``max_send_bytes`` -> RESOURCE_EXHAUSTED, undecodable messages -> INVALID_ARGUMENT; a client half-close ends
an ext_proc stream with ``grpc-status: 0`` (outcome CLIENT_CANCEL). Graceful drain: ``goaway`` sends GOAWAY
NO_ERROR with the last stream id (later streams are refused) and ends health watches UNAVAILABLE.

Two traps behind Envoy (found with the prototype): nghttp2 sends a queued RST_STREAM ahead of the stream's
queued DATA and trailers, so the RST_STREAM NO_ERROR that follows our trailers (for a client that has not
half-closed) is submitted only once nghttp2 has taken the stream's body and trailers out of its queue
(:meth:`NgH2Connection._flush`); and Envoy resets every ext_proc stream it is done with (one RST_STREAM per
request), so nghttp2's default RST_STREAM bucket (1000 burst, 33 a second) would end Envoy's connection at
load; hence its bucket is sized from ``flood_rate`` as above.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import ngh2
import structlog

from epp.server.grpc_status import GRPC_UNAVAILABLE
from epp.server.h2.connection import TimedProtocol
from epp.server.h2.frames import (
    GRPC_INTERNAL,
    GRPC_OK,
    goaway,
)
from epp.server.h2.headers import WATCH, head_of
from epp.server.h2.health import _DECODERS, HealthCall
from epp.server.h2.limits import H2Limits
from epp.server.health import HealthStatus
from epp.server.ngh2.reader import NgH2Reader
from epp.server.ngh2.sender import RESPONSE_HEADERS, NgStream
from epp.server.stream import StreamCore
from scheduler.types import Outcome

__all__ = ["NgH2Connection", "configuration"]

_log = structlog.get_logger("epp.ngh2")
_STATUS_415 = [(b":status", b"415")]
_CANCEL, _RESET, _SHUTDOWN = Outcome.CLIENT_CANCEL, Outcome.STREAM_RESET, Outcome.SHUTDOWN
_E = ngh2.ErrorCode
_NO_ERROR, _CANCEL_CODE, _REFUSED = int(_E.NO_ERROR), int(_E.CANCEL), int(_E.REFUSED_STREAM)
_ONLY_PROCESS = b"unknown method: only envoy.service.ext_proc.v3.ExternalProcessor/Process is served"
_MAX_FRAME = 1 << 20  # what we accept (SETTINGS_MAX_FRAME_SIZE), as the h2 engine
_DataReceived, _RequestReceived, _TrailersReceived = (
    ngh2.DataReceived,
    ngh2.RequestReceived,
    ngh2.TrailersReceived,
)
_StreamReset, _StreamClosed, _ConnectionClosed = ngh2.StreamReset, ngh2.StreamClosed, ngh2.ConnectionClosed
_WindowUpdated, _PingReceived, _SettingsReceived = (
    ngh2.WindowUpdated,
    ngh2.PingReceived,
    ngh2.SettingsReceived,
)
_SettingsAcknowledged = ngh2.SettingsAcknowledged


def configuration(limits: H2Limits) -> ngh2.Configuration:
    """nghttp2's options from the ``--grpc-h2-*`` limits (see the module docstring)."""
    rate = limits.flood_rate
    return ngh2.Configuration(
        auto_window_update=False,
        max_inbound_header_list_size=limits.max_header_list_size,
        max_continuations=max(8, limits.max_header_list_size // 16384 + 1),
        max_outbound_ack=rate,
        stream_reset_rate_limit=(10 * rate, 5 * rate),
        glitch_rate_limit=(10 * rate, rate),
    )


class NgH2Connection(NgH2Reader, TimedProtocol):
    """:class:`~epp.server.h2.connection.H2Connection`'s surface on ngh2 (see the module docstring)."""

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
        super().__init__()
        self._core = core
        self._open_stream = core.open
        self._on_close = on_close
        self._max_message = max_message_bytes
        self._max_send = max_send_bytes
        self._health = health
        lim = self._limits = limits or H2Limits()
        self._budget = self._conn_target = lim.connection_budget
        self._stream_window = lim.stream_window
        self._conn = ngh2.Connection(ngh2.Role.SERVER, configuration(lim))
        self._streams: dict[int, NgStream] = {}
        self._finishing: list[int] = []  # trailers submitted: RST_STREAM NO_ERROR once they are out
        self._waiting: set[int] = set()  # streams with answers waiting for a WINDOW_UPDATE
        self._held = 0  # received bytes not yet consumed (all streams)
        self._queued = 0  # answer bytes waiting here for the peer's windows
        self._reserved = 0  # grants to large messages (sum of the streams' ``commit``)
        self._handed = 0  # bytes handed to nghttp2 since the last data_to_send
        self._flushes = 0  # data_to_send calls
        self._tokens = float(lim.flood_rate)
        self._refilled = 0.0
        self._active = 0.0  # loop time of the last read
        self._last_stream = 0
        self._settings_seen = False
        self._settings_acked = False
        self._goaway_sent = False
        self.closed = False
        self.shutting_down = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    @property
    def held_bytes(self) -> int:
        """Bytes counted against the memory budget now (partial messages and waiting answers)."""
        return self._held + self._queued

    @property
    def settings_pending(self) -> bool:
        return not (self._settings_seen and self._settings_acked)

    # -- asyncio protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        lim = self._limits
        try:
            self._loop = loop = asyncio.get_running_loop()
        except RuntimeError:  # driven by hand (unit tests): no timers
            self._loop = None
        else:
            self._refilled = self._active = loop.time()
            self._timers.append(loop.call_later(lim.settings_timeout, self._check_settings))
            if lim.idle_timeout:
                self._timers.append(loop.call_later(lim.idle_timeout, self._check_idle))
            self._transport.set_write_buffer_limits(high=lim.write_buffer)
        S = ngh2.Setting
        conn = self._conn
        conn.initiate_connection({
            S.ENABLE_PUSH: 0,
            S.MAX_CONCURRENT_STREAMS: lim.max_concurrent_streams,
            S.INITIAL_WINDOW_SIZE: lim.stream_window,
            S.MAX_FRAME_SIZE: _MAX_FRAME,
            S.MAX_HEADER_LIST_SIZE: lim.max_header_list_size,
        })  # fmt: skip
        conn.set_local_window_size(lim.connection_budget)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        outcome = _SHUTDOWN if self.shutting_down else _RESET
        streams = list(self._streams.values())
        self._streams.clear()
        self.closed = True
        for stream in streams:
            stream.ext.end(outcome)
        self._gone()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        loop = self._loop
        if loop is not None:
            self._active = loop.time()
        conn = self._conn
        try:
            conn.receive_data(data)
        except ngh2.NGH2Error as exc:  # a fatal violation or flood: nghttp2 can send nothing more
            _log.warning("HTTP/2 connection error", error=str(exc), engine="ngh2")
            self.closed = True
            code = _E.ENHANCE_YOUR_CALM if isinstance(exc, ngh2.DenialOfServiceError) else _E.PROTOCOL_ERROR
            if self._transport is not None:
                self._transport.write(goaway(self._last_stream, int(code), str(exc).encode()[:256]))
                self._transport.close()
            return
        try:
            self._events(conn.events())
            if self._held and not self.closed:
                self._top_up()
        except Exception:  # a bug: end this connection cleanly, never the server
            _log.exception("HTTP/2 connection failed", engine="ngh2")
            self._terminate(int(_E.INTERNAL_ERROR))
        self._flush()

    def _events(self, events: list[Any]) -> None:
        streams = self._streams
        for event in events:
            kind = type(event)
            if kind is _DataReceived:
                sid = event.stream_id
                stream = streams.get(sid)
                data = event.data
                if stream is None or stream.closing:
                    if data:  # a stream we finished: only the connection window counts it
                        self._ack(len(data), sid)
                    if stream is not None and event.end_stream:
                        stream.remote_closed = True
                    continue
                if data:
                    buf = stream.buf
                    if not buf:
                        stream.buf = data
                    else:
                        if type(buf) is bytes:
                            stream.buf = buf = bytearray(buf)
                        buf += data  # in place: assembly stays linear in the message size
                    self._held += len(data)
                    if (
                        not stream.suspended
                        and len(stream.buf) >= stream.need
                        and not self._drain(sid, stream)
                    ):
                        continue
                if event.end_stream:
                    self._remote_end(sid, stream)
            elif kind is _RequestReceived:
                self._open(event.stream_id, event.headers, event.end_stream)
            elif kind is _StreamReset:
                self._spend()
                self._lost(event.stream_id)
            elif kind is _StreamClosed:
                self._lost(event.stream_id)
            elif kind is _WindowUpdated:
                self._spend()
                if self._waiting:
                    self._resume_waiting()
            elif kind is _TrailersReceived:
                stream = streams.get(event.stream_id)
                if stream is not None and not stream.closing:
                    self._remote_end(event.stream_id, stream)
            elif kind is _PingReceived:
                self._spend()
            elif kind is _SettingsReceived:
                self._settings_seen = True
                self._spend()
                if self._waiting:
                    self._resume_waiting()
            elif kind is _SettingsAcknowledged:
                self._settings_acked = True
            elif kind is _ConnectionClosed:
                self.closed = True
            if self.closed:
                return

    def _spend(self) -> None:
        """One control frame: take a token; none left: GOAWAY ENHANCE_YOUR_CALM."""
        self._tokens -= 1
        if self._tokens < 0:
            rate = self._limits.flood_rate
            now = self._active
            self._tokens = min(float(rate), self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            if self._tokens < 0:
                _log.warning("HTTP/2 connection error", error=f"more than {rate} control frames a second")
                self._terminate(int(_E.ENHANCE_YOUR_CALM))

    def _terminate(self, code: int) -> None:
        """Final GOAWAY ``code``; nothing more is read, the transport closes once it is written."""
        if not self.closed:
            self.closed = True
            try:
                self._conn.terminate_connection(code, last_stream_id=self._last_stream)
            except ngh2.NGH2Error:
                pass  # the connection already failed: the transport just closes

    def _ack(self, amount: int, sid: int) -> None:
        """Give ``amount`` received bytes of stream ``sid`` back to the peer's windows."""
        try:
            self._conn.acknowledge_received_data(amount, sid)
        except ngh2.NGH2Error:
            pass  # the connection already failed

    def _flush(self) -> None:
        """Write what nghttp2 has ready; RST_STREAM NO_ERROR the finished streams whose trailers went out;
        close the transport once the connection ended."""
        transport = self._transport
        if transport is None:
            return
        conn = self._conn
        try:
            out = conn.data_to_send()
            self._flushes += 1
            self._handed = 0
            finishing = self._finishing
            if finishing:
                waiting = []
                for sid in finishing:
                    try:
                        if conn.queued_body_size(sid):
                            waiting.append(sid)
                        else:
                            conn.reset_stream(sid, _NO_ERROR)
                    except ngh2.NGH2Error:
                        pass  # the stream is closed already (the client half-closed meanwhile)
                self._finishing = waiting
                more = conn.data_to_send()
                if more:
                    out += more
            for event in conn.events():
                if type(event) is _ConnectionClosed:
                    self.closed = True
        except ngh2.NGH2Error:  # the connection failed: nothing more can be sent
            out = b""
            self.closed = True
        if out and not transport.is_closing():
            transport.write(out)
        if self.closed:
            transport.close()

    # -- streams -----------------------------------------------------------------------------------

    def _open(self, sid: int, headers: Any, end_stream: bool) -> None:
        self._last_stream = max(self._last_stream, sid)
        head = head_of(headers)
        conn = self._conn
        if self._goaway_sent or self.shutting_down:
            conn.reset_stream(sid, _REFUSED)
            return
        if not head.grpc_content or not head.path_ok:
            if head.health and head.grpc_content and self._health is not None:
                call = HealthCall(self._health, head.health)
                stream = NgStream(call, self._stream_window)
                stream.call = call
                stream.decode = _DECODERS[head.health]
            else:
                if head.grpc_content:
                    status = [*RESPONSE_HEADERS, (b"grpc-status", b"12"), (b"grpc-message", _ONLY_PROCESS)]
                    conn.send_response(sid, status, end_stream=True)
                else:
                    conn.send_response(sid, _STATUS_415, end_stream=True)
                if not end_stream:
                    self._finishing.append(sid)
                return
        else:
            stream = NgStream(self._open_stream(), self._stream_window)
        self._streams[sid] = stream
        if head.timeout is not None and self._loop is not None:
            self._deadlines[sid] = self._loop.call_later(head.timeout, self._expire, sid)
        if end_stream:
            self._remote_end(sid, stream)

    def _remote_end(self, sid: int, stream: NgStream) -> None:
        """The client finished sending: an ext_proc stream ends (``grpc-status: 0``, CLIENT_CANCEL); a
        health Watch goes on once its request arrived."""
        stream.remote_closed = True
        call = stream.call
        if call is None:
            self._finish(sid, stream, GRPC_OK, "", _CANCEL)
        elif not call.requested:
            self._fail(sid, stream, GRPC_INTERNAL, "missing request message")

    def _lost(self, sid: int) -> None:
        """nghttp2 closed or the peer reset stream ``sid``: a stream still open here ends."""
        stream = self._streams.get(sid)
        if stream is not None:
            self._drop(sid, stream)
            stream.ext.end(_SHUTDOWN if self.shutting_down else _RESET)

    # -- timers ------------------------------------------------------------------------------------

    def _check_settings(self) -> None:
        if self._transport is not None and not self.closed and self.settings_pending:
            _log.warning("HTTP/2 connection error", error="SETTINGS not received or not acknowledged in time")
            self._terminate(int(_E.SETTINGS_TIMEOUT))
            self._flush()

    def _check_idle(self) -> None:
        if self._transport is None or self._loop is None or self.closed:
            return
        timeout = self._limits.idle_timeout
        now = self._loop.time()
        left = self._active + timeout - now
        if self._streams or left > 0:
            self._timers.append(self._loop.call_later(max(left, timeout / 10), self._check_idle))
            del self._timers[:-3]  # fired handles need no cancelling
        else:
            self._terminate(_NO_ERROR)
            self._flush()

    # -- shutdown ----------------------------------------------------------------------------------

    def goaway(self) -> None:
        """GOAWAY NO_ERROR (once): no new stream is accepted; open streams continue, except health
        watches, which send their last status and end UNAVAILABLE."""
        if self._transport is None or self.closed or self._goaway_sent:
            return
        self._goaway_sent = True
        try:
            self._conn.send_goaway(_NO_ERROR, last_stream_id=self._last_stream)
        except ngh2.NGH2Error:
            pass
        for sid, stream in list(self._streams.items()):
            call = stream.call
            if call is not None and call.method == WATCH:
                if stream.suspended:
                    stream.suspended = False
                    self._queue(sid, stream, call.last())
                self._finish(sid, stream, GRPC_UNAVAILABLE, "the endpoint picker is shutting down", _SHUTDOWN)
        self._flush()

    def abort_all(self) -> None:
        """End every open stream with outcome SHUTDOWN (RST_STREAM CANCEL) and close the connection."""
        self.shutting_down = True
        for sid, stream in list(self._streams.items()):
            self._drop(sid, stream)
            stream.ext.end(_SHUTDOWN)
            if not self.closed:
                try:
                    self._conn.reset_stream(sid, _CANCEL_CODE)
                except ngh2.NGH2Error:
                    pass
        self._flush()
        if self._transport is not None:
            self._transport.close()
