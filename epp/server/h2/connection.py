"""One HTTP/2 connection serving ext_proc ``Process`` streams, as an asyncio protocol.

Why: grpc.aio costs several wake-ups per message (a completion-queue thread hands every event to the
loop). Here one ``data_received`` parses every frame of the socket read, runs each stream's
:class:`~epp.server.stream.ExtProcStream` inline and writes all answers with one ``transport.write``.

Scope (a gRPC server for exactly one bidirectional method, the ext_proc ``Process``):

* request header blocks are HPACK-decoded (:mod:`epp.server.h2.headers`): another ``:path`` is answered
  UNIMPLEMENTED, a content-type other than ``application/grpc`` HTTP 415, ``grpc-timeout`` sets the
  stream's deadline (passed: ``DEADLINE_EXCEEDED``, outcome TIMEOUT);
* frames: DATA (padding stripped), HEADERS + CONTINUATION (a new stream, or the client's trailers),
  RST_STREAM, SETTINGS (ACKed; the peer's initial window and max frame size are honoured), PING
  (ACKed), WINDOW_UPDATE, GOAWAY, PRIORITY (ignored); PUSH_PROMISE from a client is a connection error;
  the first frame must be SETTINGS;
* limits (:class:`~epp.server.h2.limits.H2Limits`): concurrent streams, receive windows replenished as
  messages are consumed, a per-connection memory budget, header-block size, control-frame floods,
  settings and idle timeouts, write backpressure (reading pauses while the transport's buffer is full);
* sends obey the peer's connection and stream windows, queueing what does not fit until a WINDOW_UPDATE;
* gRPC messages: 5-byte prefix; compressed messages end the stream with UNIMPLEMENTED, messages over
  ``max_message_bytes`` with RESOURCE_EXHAUSTED (so does an answer over ``max_send_bytes``, when set:
  ``--grpc-max-send-msg-size``, and a message the memory budget cannot hold), undecodable ones or
  protocol violations with INVALID_ARGUMENT; a stream ends with ``grpc-status: 0`` once its request was
  answered or its response completed (then RST_STREAM NO_ERROR if the client has not finished sending),
  or when the client ends it. Partial messages are assembled in a ``bytearray`` (linear in their size).

Outcomes for dispatched requests that end early: client half-close -> CLIENT_CANCEL; RST_STREAM or a lost
connection -> STREAM_RESET; a passed ``grpc-timeout`` -> TIMEOUT; anything during
:meth:`H2Connection.abort_all` at shutdown -> SHUTDOWN.
"""

from __future__ import annotations

import asyncio
import struct
from typing import cast

import structlog
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse
from google.protobuf.message import DecodeError

from epp.protocol import RemoteProtocolError
from epp.server.h2 import frames as f
from epp.server.h2.frames import (
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_HEADER,
    GRPC_DEADLINE_EXCEEDED,
    GRPC_INTERNAL,
    GRPC_INVALID_ARGUMENT,
    GRPC_RESOURCE_EXHAUSTED,
    GRPC_UNIMPLEMENTED,
    HEADERS,
    PADDED,
    RESPONSE_HEADERS,
    frame,
)
from epp.server.h2.headers import HeaderError, RequestHeaders
from epp.server.h2.limits import H2Limits
from epp.server.h2.sender import H2Stream, StreamSender
from epp.server.stream import StreamCore
from scheduler.types import Outcome

__all__ = ["H2Connection"]

_log = structlog.get_logger("epp.h2")
_MAX_WINDOW = 2**31 - 1
_MAX_FRAME = 1 << 20  # what we accept (SETTINGS_MAX_FRAME_SIZE)
_GRPC_PREFIX = struct.Struct(">BI")  # compressed flag, message length
_E = f.ErrorCode
_ONLY_PROCESS = "unknown method: only envoy.service.ext_proc.v3.ExternalProcessor/Process is served"


class _ConnectionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class H2Connection(StreamSender, asyncio.Protocol):
    def __init__(
        self,
        core: StreamCore,
        max_message_bytes: int,
        on_close: object = None,
        *,
        max_send_bytes: int = 0,
        limits: H2Limits | None = None,
    ) -> None:
        self._core = core
        self._max_message = max_message_bytes
        self._max_send = max_send_bytes  # 0: no limit
        self._on_close = on_close
        lim = self._limits = limits or H2Limits()
        self._budget = lim.connection_budget
        self._stream_window = lim.stream_window
        self._headers = RequestHeaders(lim.max_header_list_size)
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
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
        self._refilled = 0.0
        self._active = 0.0  # loop time of the last read
        self._timers: list[asyncio.TimerHandle] = []
        self._goaway_sent = False
        self.shutting_down = False
        self._tasks: set[asyncio.Task[None]] = set()  # running pre-scheduling steps (strong references)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    @property
    def held_bytes(self) -> int:
        """Bytes counted against the memory budget now (partial messages and queued answers)."""
        return self._held + self._queued

    # -- asyncio protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
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
        budget = lim.connection_budget
        self._transport.write(
            f.settings(
                {
                    0x2: 0,  # no push
                    0x3: lim.max_concurrent_streams,
                    0x4: lim.stream_window,
                    0x5: _MAX_FRAME,
                    0x6: lim.max_header_list_size,
                }
            )
            + (f.window_update(0, budget - 65535) if budget > 65535 else b"")
        )

    def connection_lost(self, exc: Exception | None) -> None:
        outcome = Outcome.SHUTDOWN if self.shutting_down else Outcome.STREAM_RESET
        for stream in self._streams.values():
            if stream.timer is not None:
                stream.timer.cancel()
            stream.ext.end(outcome)
        self._streams.clear()
        for timer in self._timers:
            timer.cancel()
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

    def data_received(self, data: bytes) -> None:
        if self._loop is not None:
            self._active = self._loop.time()
        if self._buf:  # an incomplete frame: collect until it is complete (linear, not re-parsed)
            self._buf += data
            if len(self._buf) < self._need:
                return
            data, self._buf = bytes(self._buf), bytearray()
        out: list[bytes] = []
        try:
            self._frames(data, out)
        except _ConnectionError as exc:
            _log.warning("HTTP/2 connection error", error=str(exc), code=exc.code)
            self._close_with(out, exc.code, str(exc))
            return
        except Exception:  # a bug: end this connection cleanly, never the server
            _log.exception("HTTP/2 connection failed")
            self._close_with(out, _E.INTERNAL_ERROR, "internal error")
            return
        self._write(out)

    def _close_with(self, out: list[bytes], code: int, message: str) -> None:
        out.append(f.goaway(self._last_stream, code, message.encode()[:256]))
        self._write(out)
        if self._transport is not None:
            self._transport.close()

    def _check_settings(self) -> None:
        if self._transport is not None and not (self._settings_seen and self._settings_acked):
            _log.warning("HTTP/2 connection error", error="SETTINGS not received or not acknowledged in time")
            self._close_with([], _E.SETTINGS_TIMEOUT, "settings timeout")

    def _check_idle(self) -> None:
        if self._transport is None or self._loop is None:
            return
        idle = self._limits.idle_timeout
        left = self._active + idle - self._loop.time()
        if self._streams or left > 0:
            self._timers.append(self._loop.call_later(max(left, idle / 10), self._check_idle))
            del self._timers[:-3]  # fired handles need no cancelling
        else:
            self._close_with([], _E.NO_ERROR, "idle")

    # -- shutdown ----------------------------------------------------------------------------------

    def goaway(self) -> None:
        """Tell the peer no new stream will be accepted (streams already open continue)."""
        if not self._goaway_sent and self._transport is not None:
            self._goaway_sent = True
            self._transport.write(f.goaway(self._last_stream, _E.NO_ERROR))

    def abort_all(self) -> None:
        """End every open stream with outcome SHUTDOWN and close the connection."""
        self.shutting_down = True
        out: list[bytes] = []
        for sid, stream in list(self._streams.items()):
            self._drop(sid, stream)
            stream.ext.end(Outcome.SHUTDOWN)
            out.append(f.rst_stream(sid, _E.CANCEL))
        self._write(out)
        if self._transport is not None:
            self._transport.close()

    # -- frames ------------------------------------------------------------------------------------

    def _write(self, out: list[bytes]) -> None:
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(out))

    def _spend(self) -> None:
        """One unproductive control frame: take a token; none left: ENHANCE_YOUR_CALM."""
        self._tokens -= 1
        if self._tokens < 0:
            rate = self._limits.flood_rate
            if self._loop is not None:
                now = self._loop.time()
                self._tokens = min(float(rate), self._tokens + (now - self._refilled) * rate)
                self._refilled = now
            if self._tokens < 0:
                raise _ConnectionError(_E.ENHANCE_YOUR_CALM, f"more than {rate} control frames a second")

    def _frames(self, buf: bytes, out: list[bytes]) -> None:
        pos = 0
        if not self._preface:
            if len(buf) < 24:
                if f.PREFACE[: len(buf)] != buf:
                    raise _ConnectionError(_E.PROTOCOL_ERROR, "not an HTTP/2 client preface")
                self._buf, self._need = bytearray(buf), 24
                return
            if buf[:24] != f.PREFACE:
                raise _ConnectionError(_E.PROTOCOL_ERROR, "not an HTTP/2 client preface")
            self._preface = True
            pos = 24
        end = len(buf)
        while end - pos >= 9:
            high, low, kind, flags, sid = FRAME_HEADER.unpack_from(buf, pos)
            length = (high << 16) | low
            if length > _MAX_FRAME:
                raise _ConnectionError(_E.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            if end - pos - 9 < length:
                break
            sid &= 0x7FFFFFFF
            payload = buf[pos + 9 : pos + 9 + length]
            pos += 9 + length
            if self._continuation is not None and kind != f.CONTINUATION:
                raise _ConnectionError(_E.PROTOCOL_ERROR, "expected CONTINUATION")
            if not self._settings_seen:
                if kind != f.SETTINGS or flags & f.ACK:
                    raise _ConnectionError(_E.PROTOCOL_ERROR, "the first frame must be SETTINGS")
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
                    raise _ConnectionError(_E.FRAME_SIZE_ERROR if sid == 0 else _E.PROTOCOL_ERROR, "bad PING")
                if not flags & f.ACK:
                    self._spend()
                    out.append(frame(f.PING, f.ACK, 0, payload))
            elif kind == f.WINDOW_UPDATE:
                self._on_window_update(sid, payload, out)
            elif kind == f.PUSH_PROMISE:
                raise _ConnectionError(_E.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
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
            raise _ConnectionError(_E.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & f.ACK:
            if payload:
                raise _ConnectionError(_E.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            self._settings_acked = True
            return
        self._spend()
        if len(payload) % 6:
            raise _ConnectionError(_E.FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6")
        for i in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == 0x4:
                if value > _MAX_WINDOW:
                    raise _ConnectionError(_E.FLOW_CONTROL_ERROR, "initial window too large")
                delta, self._peer_window = value - self._peer_window, value
                for stream in self._streams.values():
                    stream.window += delta
                    if stream.window > _MAX_WINDOW:
                        raise _ConnectionError(_E.FLOW_CONTROL_ERROR, "stream window over 2^31-1")
            elif key == 0x5:
                if not 16384 <= value <= 16777215:
                    raise _ConnectionError(_E.PROTOCOL_ERROR, "invalid max frame size")
                self._peer_max_frame = value
            elif key == 0x2 and value > 1:
                raise _ConnectionError(_E.PROTOCOL_ERROR, "invalid ENABLE_PUSH")
        out.append(f.frame(f.SETTINGS, f.ACK, 0))
        for sid_, stream in list(self._streams.items()):
            self._flush(sid_, stream, out)

    def _on_window_update(self, sid: int, payload: bytes, out: list[bytes]) -> None:
        if len(payload) != 4:
            raise _ConnectionError(_E.FRAME_SIZE_ERROR, "WINDOW_UPDATE length")
        self._spend()
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if sid == 0:
            if increment == 0:
                raise _ConnectionError(_E.PROTOCOL_ERROR, "WINDOW_UPDATE of 0 on the connection")
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise _ConnectionError(_E.FLOW_CONTROL_ERROR, "connection window over 2^31-1")
            for stream_id, waiting in list(self._streams.items()):
                if waiting.pending or waiting.trailer is not None:
                    self._flush(stream_id, waiting, out)
            return
        stream = self._streams.get(sid)
        if stream is None:
            if sid > self._last_stream:
                raise _ConnectionError(_E.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {sid}")
            return
        stream.window += increment
        if increment == 0 or stream.window > _MAX_WINDOW:
            code = _E.PROTOCOL_ERROR if increment == 0 else _E.FLOW_CONTROL_ERROR
            self._reset(sid, stream, code, out)
        else:
            self._flush(sid, stream, out)

    def _on_headers(self, sid: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        if sid == 0:
            raise _ConnectionError(_E.PROTOCOL_ERROR, "HEADERS on stream 0")
        start, end = 0, len(payload)
        if flags & PADDED:
            start, end = 1, end - (payload[0] if payload else 0)
        if flags & f.PRIORITY_FLAG:
            start += 5
        if start > end:
            raise _ConnectionError(_E.PROTOCOL_ERROR, "HEADERS padding larger than the frame")
        if end - start > self._limits.max_header_list_size:
            raise _ConnectionError(_E.ENHANCE_YOUR_CALM, "header block too large")
        block = payload[start:end]
        if flags & END_HEADERS:
            self._end_headers(sid, bool(flags & END_STREAM), block, out)
        else:
            self._continuation, self._continuation_ends = sid, bool(flags & END_STREAM)
            self._block = bytearray(block)

    def _on_continuation(self, sid: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        if sid != self._continuation:
            raise _ConnectionError(_E.PROTOCOL_ERROR, "CONTINUATION on another stream")
        if not payload:
            self._spend()
        self._block += payload
        if len(self._block) > self._limits.max_header_list_size:
            raise _ConnectionError(_E.ENHANCE_YOUR_CALM, "header block too large")
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
            raise _ConnectionError(_E.COMPRESSION_ERROR, str(exc)) from None
        stream = self._streams.get(sid)
        if stream is not None:
            if end_stream and stream.trailer is None:
                self._remote_end(sid, stream, out)
            return
        if sid % 2 == 0:
            raise _ConnectionError(_E.PROTOCOL_ERROR, f"invalid new stream id {sid}")
        if sid <= self._last_stream:
            return  # a stream we already closed (and reset): its frames are ignored (RFC 9113 5.1)
        self._last_stream = sid
        full = len(self._streams) >= self._limits.max_concurrent_streams
        if self._goaway_sent or self.shutting_down or full:
            self._spend()
            out.append(f.rst_stream(sid, _E.REFUSED_STREAM))
            return
        if not head.grpc_content or not head.path_ok:
            self._spend()
            if head.grpc_content:
                trailers = RESPONSE_HEADERS + f.trailers(GRPC_UNIMPLEMENTED, _ONLY_PROCESS)
            else:
                trailers = f.STATUS_415
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, sid, trailers))
            if not end_stream:
                out.append(f.rst_stream(sid, _E.NO_ERROR))
            return
        stream = self._streams[sid] = H2Stream(self._core.open(), self._peer_window, self._stream_window)
        if head.timeout is not None and self._loop is not None:
            stream.timer = self._loop.call_later(head.timeout, self._expire, sid, stream)
        if end_stream:
            self._remote_end(sid, stream, out)

    def _expire(self, sid: int, stream: H2Stream) -> None:
        """The stream's ``grpc-timeout`` passed."""
        stream.timer = None
        if self._streams.get(sid) is stream:
            out: list[bytes] = []
            self._fail(sid, stream, GRPC_DEADLINE_EXCEEDED, "Deadline Exceeded", out, Outcome.TIMEOUT)
            self._write(out)

    def _on_reset(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise _ConnectionError(_E.FRAME_SIZE_ERROR, "RST_STREAM length")
        if sid == 0 or sid > self._last_stream:
            raise _ConnectionError(_E.PROTOCOL_ERROR, f"RST_STREAM on idle stream {sid}")
        self._spend()
        stream = self._streams.get(sid)
        if stream is not None:
            self._drop(sid, stream)
            stream.ext.end(Outcome.SHUTDOWN if self.shutting_down else Outcome.STREAM_RESET)

    def _on_data(self, sid: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        n = len(payload)
        self._recv_window -= n
        if self._recv_window < 0:
            raise _ConnectionError(_E.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        if n == 0 and not flags & END_STREAM:
            self._spend()
        stream = self._streams.get(sid)
        if stream is None or stream.trailer is not None:
            if sid == 0 or sid > self._last_stream:
                raise _ConnectionError(_E.PROTOCOL_ERROR, f"DATA on idle stream {sid}")
            return  # a stream we already finished: only the connection window counts
        stream.recv_window -= n
        if stream.recv_window < 0:
            self._reset(sid, stream, _E.FLOW_CONTROL_ERROR, out)
            return
        if flags & PADDED:
            pad = payload[0] if payload else 0
            if pad >= n:
                raise _ConnectionError(_E.PROTOCOL_ERROR, "DATA padding larger than the frame")
            payload = payload[1 : n - pad]
            stream.recv_window += pad + 1  # padding is consumed at once
        buf = stream.buf
        if buf:
            if type(buf) is bytes:
                stream.buf = buf = bytearray(buf)
            buf += payload  # in place: assembly stays linear in the message size
        else:
            stream.buf = buf = payload
        self._held += len(payload)
        # While the stream waits for the pre-scheduling step, its messages stay buffered.
        if stream.task is None and len(buf) >= stream.need and not self._drain(sid, stream, out):
            return
        if flags & END_STREAM:
            self._remote_end(sid, stream, out)

    def _drain(self, sid: int, stream: H2Stream, out: list[bytes]) -> bool:
        """Feed the complete messages of ``stream.buf``; False when the stream ended."""
        buf = stream.buf
        pos, end, need = 0, len(buf), 5
        while end - pos >= 5:
            compressed, size = _GRPC_PREFIX.unpack_from(buf, pos)
            if compressed:
                self._fail(sid, stream, GRPC_UNIMPLEMENTED, "compressed gRPC messages are not supported", out)
                return False
            if size > self._max_message:
                self._fail(sid, stream, GRPC_RESOURCE_EXHAUSTED, f"message of {size} bytes is too large", out)
                return False
            if end - pos - 5 < size:
                need = 5 + size
                break
            try:
                message = ProcessingRequest.FromString(buf[pos + 5 : pos + 5 + size])
                responses = stream.ext.feed(message)
            except (DecodeError, RemoteProtocolError) as exc:
                _log.warning("ext_proc protocol error", error=str(exc))
                self._fail(sid, stream, GRPC_INVALID_ARGUMENT, str(exc) or "invalid ProcessingRequest", out)
                return False
            except Exception:
                _log.exception("ext_proc stream failed")
                self._fail(sid, stream, GRPC_INTERNAL, "internal error in the endpoint picker", out)
                return False
            pos += 5 + size
            if self._tokens < self._limits.flood_rate:
                self._tokens += 1  # a message received: a productive frame
            if stream.commit:
                self._reserved -= stream.commit
                stream.commit = 0
            if not self._queue(sid, stream, responses, out):
                return False
            if stream.ext.suspended:  # token-producer's render: the rest waits for it
                stream.task = task = asyncio.get_running_loop().create_task(self._settle(sid, stream))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                need = 0
                break
        if pos:
            self._held -= pos
            if pos == end:
                stream.buf = b""
            elif type(buf) is bytearray:
                del buf[:pos]
            else:
                stream.buf = bytearray(buf[pos:])
        stream.need = need
        # stream window: the rest of a message that cannot complete in it, else what was consumed
        held = end - pos
        short = need - held - stream.recv_window
        if short > 0:
            if need > self._stream_window and not self._reserve(sid, stream, need, out):
                return False
            out.append(f.window_update(sid, short))
            stream.recv_window += short
        else:
            grant = self._stream_window - held - stream.recv_window
            if grant >= self._stream_window >> 1:
                out.append(f.window_update(sid, grant))
                stream.recv_window += grant
        if stream.pending:
            self._flush(sid, stream, out)
        return True

    def _reserve(self, sid: int, stream: H2Stream, need: int, out: list[bytes]) -> bool:
        """Grant a message larger than the stream window if the connection budget can hold it."""
        others = self._held - len(stream.buf) + self._queued + self._reserved - stream.commit
        if others + need > self._budget:
            message = f"message of {need - 5} bytes: over the connection memory budget ({self._budget} bytes)"
            self._fail(sid, stream, GRPC_RESOURCE_EXHAUSTED, message, out)
            return False
        self._reserved += need - stream.commit
        stream.commit = need
        return True

    async def _settle(self, sid: int, stream: H2Stream) -> None:
        """Await the stream's pre-scheduling step, send its answers, go on with buffered messages."""
        responses: list[ProcessingResponse] | None
        try:
            responses = await stream.ext.settle()
        except Exception:
            _log.exception("ext_proc pre-scheduling step failed")
            responses = None
        stream.task = None
        if self._streams.get(sid) is not stream or self._transport is None:
            return  # the stream or the connection ended meanwhile
        out: list[bytes] = []
        if responses is None:
            self._fail(sid, stream, GRPC_INTERNAL, "internal error in the endpoint picker", out)
        elif self._queue(sid, stream, responses, out):
            self._drain(sid, stream, out)
        self._write(out)
