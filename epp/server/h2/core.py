"""The HTTP/2 protocol core of the ext_proc engine: bytes in, bytes and events out (sans-I/O, h11-style).

:class:`H2Core` holds one connection's protocol state and does no I/O: no sockets, no event loop, no clock
(the caller passes ``now``, in seconds of any monotonic clock). Each call returns the bytes to send;
what needs a timer or a task is appended to :attr:`H2Core.events` (:mod:`epp.server.h2.events`). The
asyncio adapter (:class:`~epp.server.h2.connection.H2Connection`) owns the socket, the timers and the
tasks; tests drive the core with bytes alone.

Scope (a gRPC server for exactly one bidirectional method, the ext_proc ``Process``, plus grpc.health.v1
when given a ``health`` status: :mod:`epp.server.h2.health`, dispatched once per stream at its HEADERS):

* request header blocks are HPACK-decoded (:mod:`epp.server.h2.headers`): another ``:path`` is answered
  UNIMPLEMENTED, a content-type other than ``application/grpc`` HTTP 415, ``grpc-timeout`` sets the
  stream's deadline (:class:`~epp.server.h2.events.DeadlineSet`; passed: ``DEADLINE_EXCEEDED``, outcome
  TIMEOUT);
* frames: DATA (padding stripped), HEADERS + CONTINUATION (a new stream, or the client's trailers),
  RST_STREAM, SETTINGS (ACKed; the peer's initial window and max frame size are honoured), PING
  (ACKed), WINDOW_UPDATE, GOAWAY, PRIORITY (ignored); PUSH_PROMISE from a client is a connection error;
  the first frame must be SETTINGS;
* limits (:class:`~epp.server.h2.limits.H2Limits`): concurrent streams, receive windows replenished as
  messages are consumed, a per-connection memory budget, header-block size, control-frame floods (a
  token bucket refilled by the ``now`` of each read); the settings and idle timeouts are decided here
  (:attr:`H2Core.settings_pending`, :meth:`H2Core.idle_check`) and timed by the adapter;
* sends obey the peer's connection and stream windows, queueing what does not fit until a WINDOW_UPDATE
  (:mod:`epp.server.h2.sender`); gRPC messages are assembled, decoded and fed to their ext_proc stream by
  :mod:`epp.server.h2.reader`. Stream states: :class:`~epp.server.h2.events.StreamState`.

Outcomes for dispatched requests that end early: client half-close -> CLIENT_CANCEL; RST_STREAM or a lost
connection -> STREAM_RESET; a passed ``grpc-timeout`` -> TIMEOUT; anything during :meth:`H2Core.abort_all`
at shutdown -> SHUTDOWN. A connection error (:class:`~epp.server.h2.reader.GoAwayError`) sends GOAWAY and
appends :class:`~epp.server.h2.events.ConnectionClosed`; so does an unexpected exception (a bug; GOAWAY
INTERNAL_ERROR), which ends this connection and never the server.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import structlog

from epp.server.h2 import frames as f
from epp.server.h2.events import ConnectionClosed, DeadlineSet, Event, ExtProcHandler, StreamState
from epp.server.h2.frames import (
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_HEADER,
    GRPC_DEADLINE_EXCEEDED,
    GRPC_UNIMPLEMENTED,
    HEADERS,
    PADDED,
    RESPONSE_HEADERS,
    frame,
)
from epp.server.h2.headers import HeaderError, RequestHeaders
from epp.server.h2.health import HealthServing
from epp.server.h2.limits import H2Limits
from epp.server.h2.reader import GoAwayError, MessageReader
from epp.server.h2.sender import _CLOSING, _STREAM_RESET, H2Stream
from epp.server.health import HealthStatus
from scheduler.types import Outcome

__all__ = ["H2Core"]

_log = structlog.get_logger("epp.h2")
_MAX_WINDOW = 2**31 - 1
_MAX_FRAME = 1 << 20  # what we accept (SETTINGS_MAX_FRAME_SIZE)
_E = f.ErrorCode
_SHUTDOWN, _TIMEOUT = Outcome.SHUTDOWN, Outcome.TIMEOUT
_ONLY_PROCESS = "unknown method: only envoy.service.ext_proc.v3.ExternalProcessor/Process is served"


class H2Core(MessageReader, HealthServing):
    """One connection's protocol state; ``open_stream`` makes the ext_proc stream of each new stream;
    ``health`` (None: not served, UNIMPLEMENTED) answers grpc.health.v1 calls.

    Not thread-safe; every method returns the bytes to send (possibly empty) and may append to
    :attr:`events`, which the caller empties.
    """

    def __init__(
        self,
        open_stream: Callable[[], ExtProcHandler],
        max_message_bytes: int,
        *,
        max_send_bytes: int = 0,
        limits: H2Limits | None = None,
        health: HealthStatus | None = None,
    ) -> None:
        self._open_stream = open_stream
        self._health = health
        self._max_message = max_message_bytes
        self._max_send = max_send_bytes  # 0: no limit
        lim = self._limits = limits or H2Limits()
        self._budget = lim.connection_budget
        self._stream_window = lim.stream_window
        self._headers = RequestHeaders(lim.max_header_list_size)
        self.events: list[Event] = []
        self.closed = False  # GOAWAY with an error (or idle) sent: nothing more is read
        self.shutting_down = False
        self._buf: bytearray = bytearray()  # an incomplete frame
        self._need = 0  # len(_buf) needed to complete it
        self._preface = False
        self._settings_seen = False  # the client's first SETTINGS
        self._settings_acked = False  # our SETTINGS, acknowledged
        self._streams: dict[int, H2Stream] = {}
        self._last_stream = 0
        self._continuation: int | None = None  # stream id whose header block continues
        self._continuation_ends = False
        self._block = bytearray()
        self._peer_window = 65535
        self._peer_max_frame = 16384
        self._send_window = 65535
        self._recv_window = lim.connection_budget  # what the peer may still send on the connection
        self._held = 0  # bytes of partial messages held by the streams
        self._reserved = 0  # bytes granted to large messages (sum of the streams' ``commit``)
        self._queued = 0  # bytes of answers waiting for the peer's windows
        self._tokens = float(lim.flood_rate)
        self._refilled = 0.0  # ``now`` of the last token refill
        self._active = 0.0  # ``now`` of the last read
        self._goaway_sent = False

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    @property
    def held_bytes(self) -> int:
        """Bytes counted against the memory budget now (partial messages and queued answers)."""
        return self._held + self._queued

    def state_of(self, sid: int) -> StreamState | None:
        """Stream ``sid``'s state: None for a stream never opened (idle), CLOSED for one forgotten."""
        stream = self._streams.get(sid)
        if stream is not None:
            return stream.state
        return StreamState.CLOSED if 0 < sid <= self._last_stream else None

    @property
    def settings_pending(self) -> bool:
        """The client's SETTINGS has not arrived, or ours is not acknowledged (checked after the
        settings timeout: then :meth:`close` with SETTINGS_TIMEOUT)."""
        return not (self._settings_seen and self._settings_acked)

    def idle_check(self, now: float, timeout: float) -> float:
        """Seconds until the idle timeout should be checked again; 0.0 when the connection is idle now:
        no open stream and nothing read for ``timeout`` seconds (then :meth:`close` with NO_ERROR)."""
        left = self._active + timeout - now
        if self._streams or left > 0:
            return max(left, timeout / 10)
        return 0.0

    # -- connection --------------------------------------------------------------------------------

    def initiate(self, now: float) -> bytes:
        """Our SETTINGS (the limits) and the connection window opened to the budget."""
        self._refilled = self._active = now
        lim = self._limits
        budget = lim.connection_budget
        return f.settings(
            {
                0x2: 0,  # no push
                0x3: lim.max_concurrent_streams,
                0x4: lim.stream_window,
                0x5: _MAX_FRAME,
                0x6: lim.max_header_list_size,
            }
        ) + (f.window_update(0, budget - 65535) if budget > 65535 else b"")

    def receive_data(self, data: bytes, now: float) -> bytes:
        """Bytes read from the peer; returns the bytes to send."""
        if self.closed:
            return b""
        self._active = now
        if self._buf:  # an incomplete frame: collect until it is complete (linear, not re-parsed)
            self._buf += data
            if len(self._buf) < self._need:
                return b""
            data, self._buf = bytes(self._buf), bytearray()
        out: list[bytes] = []
        try:
            self._frames(data, out)
        except GoAwayError as exc:
            _log.warning("HTTP/2 connection error", error=str(exc), code=exc.code)
            self._close_with(out, exc.code, str(exc))
        except Exception:  # a bug: end this connection cleanly, never the server
            _log.exception("HTTP/2 connection failed")
            self._close_with(out, _E.INTERNAL_ERROR, "internal error")
        return b"".join(out)

    def close(self, code: int, reason: str) -> bytes:
        """End the connection: GOAWAY ``code`` (and :class:`ConnectionClosed`); streams end when the
        adapter reports the connection lost."""
        out: list[bytes] = []
        self._close_with(out, code, reason)
        return b"".join(out)

    def _close_with(self, out: list[bytes], code: int, reason: str) -> None:
        out.append(f.goaway(self._last_stream, code, reason.encode()[:256]))
        self.closed = True
        self.events.append(ConnectionClosed(code, reason))

    def goaway(self) -> bytes:
        """GOAWAY NO_ERROR (once): no new stream will be accepted; streams already open continue, except
        health Watch streams, which end UNAVAILABLE after their last status."""
        if self._goaway_sent or self.closed:
            return b""
        self._goaway_sent = True
        out = [f.goaway(self._last_stream, _E.NO_ERROR)]
        self._end_watches(out)
        return b"".join(out)

    def abort_all(self) -> bytes:
        """Shutdown: end every open stream with outcome SHUTDOWN (RST_STREAM CANCEL each)."""
        self.shutting_down = True
        out: list[bytes] = []
        for sid, stream in list(self._streams.items()):
            self._drop(sid, stream)
            stream.ext.end(_SHUTDOWN)
            out.append(f.rst_stream(sid, _E.CANCEL))
        return b"".join(out)

    def connection_lost(self) -> None:
        """The socket is gone: every open stream ends (STREAM_RESET, or SHUTDOWN while shutting down)."""
        outcome = _SHUTDOWN if self.shutting_down else _STREAM_RESET
        streams = list(self._streams.values())
        self._streams.clear()
        self.closed = True
        for stream in streams:
            stream.ext.end(outcome)

    def expire(self, sid: int) -> bytes:
        """Stream ``sid``'s ``grpc-timeout`` passed: it ends DEADLINE_EXCEEDED (outcome TIMEOUT), also when
        its trailers were decided but answers still wait for the peer's window (those are dropped)."""
        stream = self._streams.get(sid)
        if stream is None or not stream.deadline:
            return b""
        stream.deadline = False
        out: list[bytes] = []
        if stream.state is _CLOSING:  # the answers still waiting are dropped; the trailers say why
            stream.pending.clear()
            stream.pending_bytes = 0
            stream.trailer = f.trailers(GRPC_DEADLINE_EXCEEDED, "Deadline Exceeded")
            stream.ext.end(_TIMEOUT, GRPC_DEADLINE_EXCEEDED)
            self._flush(sid, stream, out)
        else:
            self._fail(sid, stream, GRPC_DEADLINE_EXCEEDED, "Deadline Exceeded", out, _TIMEOUT)
        return b"".join(out)

    def _spend(self) -> None:
        """One unproductive control frame: take a token; none left: ENHANCE_YOUR_CALM."""
        self._tokens -= 1
        if self._tokens < 0:
            rate = self._limits.flood_rate
            now = self._active
            self._tokens = min(float(rate), self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            if self._tokens < 0:
                raise GoAwayError(_E.ENHANCE_YOUR_CALM, f"more than {rate} control frames a second")

    # -- frames ------------------------------------------------------------------------------------

    def _frames(self, buf: bytes, out: list[bytes]) -> None:
        pos = 0
        if not self._preface:
            if len(buf) < 24:
                if f.PREFACE[: len(buf)] != buf:
                    raise GoAwayError(_E.PROTOCOL_ERROR, "not an HTTP/2 client preface")
                self._buf, self._need = bytearray(buf), 24
                return
            if buf[:24] != f.PREFACE:
                raise GoAwayError(_E.PROTOCOL_ERROR, "not an HTTP/2 client preface")
            self._preface = True
            pos = 24
        end = len(buf)
        while end - pos >= 9:
            high, low, kind, flags, sid = FRAME_HEADER.unpack_from(buf, pos)
            length = (high << 16) | low
            if length > _MAX_FRAME:
                raise GoAwayError(_E.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            if end - pos - 9 < length:
                break
            sid &= 0x7FFFFFFF
            payload = buf[pos + 9 : pos + 9 + length]
            pos += 9 + length
            if self._continuation is not None and kind != f.CONTINUATION:
                raise GoAwayError(_E.PROTOCOL_ERROR, "expected CONTINUATION")
            if not self._settings_seen:
                if kind != f.SETTINGS or flags & f.ACK:
                    raise GoAwayError(_E.PROTOCOL_ERROR, "the first frame must be SETTINGS")
                self._settings_seen = True
            if kind == DATA:
                self._on_data(sid, flags, payload, out)
            elif kind == HEADERS:
                self._on_headers(sid, flags, payload, out)
            elif kind == f.CONTINUATION:
                self._on_continuation(sid, flags, payload, out)
            elif kind == f.RST_STREAM:
                self._on_reset(sid, payload)
            elif kind == f.SETTINGS:
                self._on_settings(sid, flags, payload, out)
            elif kind == f.PING:
                if len(payload) != 8 or sid:
                    raise GoAwayError(_E.FRAME_SIZE_ERROR if sid == 0 else _E.PROTOCOL_ERROR, "bad PING")
                if not flags & f.ACK:
                    self._spend()
                    out.append(frame(f.PING, f.ACK, 0, payload))
            elif kind == f.WINDOW_UPDATE:
                self._on_window_update(sid, payload, out)
            elif kind == f.PUSH_PROMISE:
                raise GoAwayError(_E.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
            elif kind != f.GOAWAY:  # PRIORITY and unknown frame types need no action
                self._spend()
        if pos < end:
            rest = end - pos
            self._buf = bytearray(buf[pos:])
            self._need = 9 + ((buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]) if rest >= 9 else 9
        # connection window: what the budget can hold again (every quarter, or at once when it runs low)
        grant = self._budget - self._held - self._queued - self._recv_window
        if grant > 0 and (grant >= self._budget >> 2 or self._recv_window < self._budget >> 2):
            out.append(f.window_update(0, grant))
            self._recv_window += grant

    def _on_settings(self, sid: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        if sid:
            raise GoAwayError(_E.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise GoAwayError(_E.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            self._settings_acked = True
            return
        self._spend()
        if len(payload) % 6:
            raise GoAwayError(_E.FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6")
        for i in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == 0x4:
                if value > _MAX_WINDOW:
                    raise GoAwayError(_E.FLOW_CONTROL_ERROR, "initial window too large")
                delta, self._peer_window = value - self._peer_window, value
                for stream in self._streams.values():
                    stream.window += delta
                    if stream.window > _MAX_WINDOW:
                        raise GoAwayError(_E.FLOW_CONTROL_ERROR, "stream window over 2^31-1")
            elif key == 0x5:
                if not 16384 <= value <= 16777215:
                    raise GoAwayError(_E.PROTOCOL_ERROR, "invalid max frame size")
                self._peer_max_frame = value
            elif key == 0x2 and value > 1:
                raise GoAwayError(_E.PROTOCOL_ERROR, "invalid ENABLE_PUSH")
        out.append(f.frame(f.SETTINGS, f.ACK, 0))
        for sid_, stream in list(self._streams.items()):
            self._flush(sid_, stream, out)

    def _on_window_update(self, sid: int, payload: bytes, out: list[bytes]) -> None:
        if len(payload) != 4:
            raise GoAwayError(_E.FRAME_SIZE_ERROR, "WINDOW_UPDATE length")
        self._spend()
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if sid == 0:
            if increment == 0:
                raise GoAwayError(_E.PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on the connection")
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise GoAwayError(_E.FLOW_CONTROL_ERROR, "connection window over 2^31-1")
            for stream_id, waiting in list(self._streams.items()):
                if waiting.pending or waiting.state is _CLOSING:
                    self._flush(stream_id, waiting, out)
            return
        stream = self._streams.get(sid)
        if stream is None:
            if sid > self._last_stream:
                raise GoAwayError(_E.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {sid}")
            return
        stream.window += increment
        if increment == 0 or stream.window > _MAX_WINDOW:
            code = _E.PROTOCOL_ERROR if increment == 0 else _E.FLOW_CONTROL_ERROR
            self._reset(sid, stream, code, out)
        else:
            self._flush(sid, stream, out)

    def _on_headers(self, sid: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        if sid == 0:
            raise GoAwayError(_E.PROTOCOL_ERROR, "HEADERS on stream 0")
        start, end = 0, len(payload)
        if flags & PADDED:
            start, end = 1, end - (payload[0] if payload else 0)
        if flags & f.PRIORITY_FLAG:
            start += 5
        if start > end:
            raise GoAwayError(_E.PROTOCOL_ERROR, "HEADERS padding larger than the frame")
        if end - start > self._limits.max_header_list_size:
            raise GoAwayError(_E.ENHANCE_YOUR_CALM, "header block too large")
        block = payload[start:end]
        if flags & END_HEADERS:
            self._end_headers(sid, bool(flags & END_STREAM), block, out)
        else:
            self._continuation, self._continuation_ends = sid, bool(flags & END_STREAM)
            self._block = bytearray(block)

    def _on_continuation(self, sid: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        if sid != self._continuation:
            raise GoAwayError(_E.PROTOCOL_ERROR, "CONTINUATION on another stream")
        if not payload:
            self._spend()
        self._block += payload
        if len(self._block) > self._limits.max_header_list_size:
            raise GoAwayError(_E.ENHANCE_YOUR_CALM, "header block too large")
        if flags & END_HEADERS:
            self._continuation = None
            self._end_headers(sid, self._continuation_ends, bytes(self._block), out)
            self._block = bytearray()

    def _end_headers(self, sid: int, end_stream: bool, block: bytes, out: list[bytes]) -> None:
        """A complete header block: the client's trailers, or a new stream (served, refused or
        answered with an error)."""
        try:
            head = self._headers.read(block)
        except HeaderError as exc:
            raise GoAwayError(_E.COMPRESSION_ERROR, str(exc)) from None
        stream = self._streams.get(sid)
        if stream is not None:
            if end_stream and stream.state is not _CLOSING:
                self._remote_end(sid, stream, out)
            return
        if sid % 2 == 0:
            raise GoAwayError(_E.PROTOCOL_ERROR, f"invalid new stream id {sid}")
        if sid <= self._last_stream:
            return  # a stream we already closed (and reset): its frames are ignored (RFC 9113 5.1)
        self._last_stream = sid
        full = len(self._streams) >= self._limits.max_concurrent_streams
        if self._goaway_sent or self.shutting_down or full:
            self._spend()
            out.append(f.rst_stream(sid, _E.REFUSED_STREAM))
            return
        if not head.grpc_content or not head.path_ok:
            if head.health and head.grpc_content and self._health is not None:
                self._open_health(sid, head.health, head.timeout, end_stream, out)
                return
            self._spend()
            if head.grpc_content:
                trailers = RESPONSE_HEADERS + f.trailers(GRPC_UNIMPLEMENTED, _ONLY_PROCESS)
            else:
                trailers = f.STATUS_415
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, sid, trailers))
            if not end_stream:
                out.append(f.rst_stream(sid, _E.NO_ERROR))
            return
        stream = self._streams[sid] = H2Stream(self._open_stream(), self._peer_window, self._stream_window)
        if head.timeout is not None:
            stream.deadline = True
            self.events.append(DeadlineSet(sid, head.timeout))
        if end_stream:
            self._remote_end(sid, stream, out)

    def _on_reset(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise GoAwayError(_E.FRAME_SIZE_ERROR, "RST_STREAM length")
        if sid == 0 or sid > self._last_stream:
            raise GoAwayError(_E.PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
        self._spend()
        stream = self._streams.get(sid)
        if stream is not None:
            self._drop(sid, stream)
            stream.ext.end(_SHUTDOWN if self.shutting_down else _STREAM_RESET)
