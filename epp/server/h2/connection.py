"""One HTTP/2 connection serving ext_proc ``Process`` streams, as an asyncio protocol.

Why: grpc.aio costs several wake-ups per message (a completion-queue thread hands every event to the
loop). Here one ``data_received`` parses every frame of the socket read, runs each stream's
:class:`~epp.server.stream.ExtProcStream` inline and writes all answers with one ``transport.write``.

Scope (a gRPC server for exactly one bidirectional method, the ext_proc ``Process``):

* every stream is taken as a ``Process`` call: request header blocks are not decoded (HPACK decoder
  state is only needed to read headers, and no header of the request is needed); serve nothing else on
  this port (health has its own port);
* frames: DATA (padding stripped), HEADERS + CONTINUATION (a new stream, or the client's trailers),
  RST_STREAM, SETTINGS (ACKed; the peer's initial window and max frame size are honoured), PING
  (ACKed), WINDOW_UPDATE, GOAWAY, PRIORITY (ignored); PUSH_PROMISE from a client is a connection error;
* flow control: the receive windows are opened to 2^31-1 and replenished every 2^30 bytes; sends obey
  the peer's connection and stream windows, queueing what does not fit until a WINDOW_UPDATE;
* gRPC messages: 5-byte prefix; compressed messages end the stream with UNIMPLEMENTED, messages over
  ``max_message_bytes`` with RESOURCE_EXHAUSTED (so does an answer over ``max_send_bytes``, when set:
  ``--grpc-max-send-msg-size``), undecodable ones or protocol violations with
  INVALID_ARGUMENT; a stream ends with ``grpc-status: 0`` once its request was answered or its response
  completed (then RST_STREAM NO_ERROR if the client has not finished sending), or when the client ends it.

Outcomes for dispatched requests that end early: client half-close -> CLIENT_CANCEL; RST_STREAM or a lost
connection -> STREAM_RESET; anything during :meth:`H2Connection.abort_all` at shutdown -> SHUTDOWN.
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
from epp.server.h2.frames import DATA, END_HEADERS, END_STREAM, HEADERS, PADDED, RESPONSE_HEADERS, frame
from epp.server.stream import ExtProcStream, StreamCore
from scheduler.types import Outcome

__all__ = ["H2Connection"]

_log = structlog.get_logger("epp.h2")
_MAX_WINDOW = 2**31 - 1
_REPLENISH = 2**30
_MAX_FRAME = 1 << 20  # what we accept (SETTINGS_MAX_FRAME_SIZE)
_FRAME_HEADER = struct.Struct(">BHBBI")  # length (24 bits as 8 + 16), type, flags, R + stream id
_GRPC_PREFIX = struct.Struct(">BI")  # compressed flag, message length
_CANCELLED, _RESET = Outcome.CLIENT_CANCEL, Outcome.STREAM_RESET  # globals are cheaper than Enum members
_OK, _INVALID_ARGUMENT, _RESOURCE_EXHAUSTED, _UNIMPLEMENTED, _INTERNAL = 0, 3, 8, 12, 13


class _ConnectionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Stream:
    __slots__ = (
        "buf",
        "ext",
        "headers_sent",
        "pending",
        "pending_bytes",
        "recv_consumed",
        "remote_closed",
        "task",
        "trailer",
        "window",
    )

    def __init__(self, ext: ExtProcStream, window: int) -> None:
        self.ext = ext
        self.buf = b""
        self.window = window
        self.pending: list[bytes] = []  # gRPC-framed messages (prefix, body, ...) waiting to be sent
        self.pending_bytes = 0
        self.trailer: bytes | None = None  # trailers to send once ``pending`` is flushed
        self.task: asyncio.Task[None] | None = None  # the async pre-scheduling step, while it runs
        self.headers_sent = False
        self.remote_closed = False
        self.recv_consumed = 0


class H2Connection(asyncio.Protocol):
    def __init__(
        self,
        core: StreamCore,
        max_message_bytes: int,
        on_close: object = None,
        *,
        max_send_bytes: int = 0,
    ) -> None:
        self._core = core
        self._max_message = max_message_bytes
        self._max_send = max_send_bytes  # 0: no limit
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._buf = b""
        self._preface = False
        self._streams: dict[int, _Stream] = {}
        self._last_stream = 0
        self._continuation: int | None = None  # stream id whose header block continues
        self._continuation_ends = False
        self._peer_window = 65535
        self._peer_max_frame = 16384
        self._send_window = 65535
        self._recv_consumed = 0
        self._goaway_sent = False
        self.shutting_down = False
        self._tasks: set[asyncio.Task[None]] = set()  # running pre-scheduling steps (strong references)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    # -- asyncio protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        transport = self._transport
        transport.write(
            f.settings({0x4: _MAX_WINDOW, 0x5: _MAX_FRAME, 0x2: 0})  # window, frame size, no push
            + f.window_update(0, _MAX_WINDOW - 65535)
        )

    def connection_lost(self, exc: Exception | None) -> None:
        outcome = Outcome.SHUTDOWN if self.shutting_down else Outcome.STREAM_RESET
        for stream in self._streams.values():
            stream.ext.end(outcome)
        self._streams.clear()
        self._transport = None
        if callable(self._on_close):
            self._on_close(self)

    def data_received(self, data: bytes) -> None:
        out: list[bytes] = []
        try:
            self._frames(self._buf + data if self._buf else data, out)
        except _ConnectionError as exc:
            _log.warning("HTTP/2 connection error", error=str(exc), code=exc.code)
            self._close_with(out, exc.code, str(exc))
            return
        except Exception:  # a bug: end this connection cleanly, never the server
            _log.exception("HTTP/2 connection failed")
            self._close_with(out, f.ErrorCode.INTERNAL_ERROR, "internal error")
            return
        self._write(out)

    def _close_with(self, out: list[bytes], code: int, message: str) -> None:
        out.append(f.goaway(self._last_stream, code, message.encode()[:256]))
        self._write(out)
        if self._transport is not None:
            self._transport.close()

    # -- shutdown ----------------------------------------------------------------------------------

    def goaway(self) -> None:
        """Tell the peer no new stream will be accepted (streams already open continue)."""
        if not self._goaway_sent and self._transport is not None:
            self._goaway_sent = True
            self._transport.write(f.goaway(self._last_stream, f.ErrorCode.NO_ERROR))

    def abort_all(self) -> None:
        """End every open stream with outcome SHUTDOWN and close the connection."""
        self.shutting_down = True
        out: list[bytes] = []
        for sid, stream in list(self._streams.items()):
            stream.ext.end(Outcome.SHUTDOWN)
            out.append(f.rst_stream(sid, f.ErrorCode.CANCEL))
        self._streams.clear()
        self._write(out)
        if self._transport is not None:
            self._transport.close()

    # -- frames ------------------------------------------------------------------------------------

    def _write(self, out: list[bytes]) -> None:
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(out))

    def _frames(self, buf: bytes, out: list[bytes]) -> None:
        pos = 0
        if not self._preface:
            if len(buf) < 24:
                self._buf = buf
                return
            if buf[:24] != f.PREFACE:
                raise _ConnectionError(f.ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 client preface")
            self._preface = True
            pos = 24
        end = len(buf)
        while end - pos >= 9:
            high, low, kind, flags, sid = _FRAME_HEADER.unpack_from(buf, pos)
            length = (high << 16) | low
            if length > _MAX_FRAME:
                raise _ConnectionError(f.ErrorCode.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            if end - pos - 9 < length:
                break
            sid &= 0x7FFFFFFF
            payload = buf[pos + 9 : pos + 9 + length]
            pos += 9 + length
            if self._continuation is not None and kind != f.CONTINUATION:
                raise _ConnectionError(f.ErrorCode.PROTOCOL_ERROR, "expected CONTINUATION")
            if kind == DATA:
                self._on_data(sid, flags, payload, out)
            elif kind == HEADERS:
                self._on_headers(sid, flags, out)
            elif kind == f.CONTINUATION:
                self._on_continuation(sid, flags, out)
            elif kind == f.RST_STREAM:
                self._on_reset(sid)
            elif kind == f.SETTINGS:
                self._on_settings(flags, payload, out)
            elif kind == f.PING:
                if not flags & f.ACK:
                    out.append(frame(f.PING, f.ACK, 0, payload))
            elif kind == f.WINDOW_UPDATE:
                self._on_window_update(sid, payload, out)
            elif kind == f.PUSH_PROMISE:
                raise _ConnectionError(f.ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client")
            # PRIORITY, GOAWAY and unknown frame types need no action
        self._buf = buf[pos:]
        if self._recv_consumed >= _REPLENISH:
            out.append(f.window_update(0, self._recv_consumed))
            self._recv_consumed = 0

    def _on_settings(self, flags: int, payload: bytes, out: list[bytes]) -> None:
        if flags & f.ACK:
            return
        if len(payload) % 6:
            raise _ConnectionError(f.ErrorCode.FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6")
        for i in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == 0x4:
                if value > _MAX_WINDOW:
                    raise _ConnectionError(f.ErrorCode.FLOW_CONTROL_ERROR, "initial window too large")
                delta, self._peer_window = value - self._peer_window, value
                for stream in self._streams.values():
                    stream.window += delta
            elif key == 0x5:
                if not 16384 <= value <= 16777215:
                    raise _ConnectionError(f.ErrorCode.PROTOCOL_ERROR, "invalid max frame size")
                self._peer_max_frame = value
        out.append(f.frame(f.SETTINGS, f.ACK, 0))
        for sid, stream in list(self._streams.items()):
            self._flush(sid, stream, out)

    def _on_window_update(self, sid: int, payload: bytes, out: list[bytes]) -> None:
        if len(payload) != 4:
            raise _ConnectionError(f.ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE length")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if sid == 0:
            self._send_window += increment
            for stream_id, waiting in list(self._streams.items()):
                if waiting.pending or waiting.trailer is not None:
                    self._flush(stream_id, waiting, out)
        else:
            stream = self._streams.get(sid)
            if stream is not None:
                stream.window += increment
                self._flush(sid, stream, out)

    def _on_headers(self, sid: int, flags: int, out: list[bytes]) -> None:
        if not flags & END_HEADERS:
            self._continuation, self._continuation_ends = sid, bool(flags & END_STREAM)
        stream = self._streams.get(sid)
        if stream is None:
            if sid % 2 == 0 or sid == 0:
                raise _ConnectionError(f.ErrorCode.PROTOCOL_ERROR, f"invalid new stream id {sid}")
            if sid <= self._last_stream:
                return  # a stream we already closed (and reset): its frames are ignored (RFC 9113 5.1)
            self._last_stream = sid
            if self._goaway_sent or self.shutting_down:
                out.append(f.rst_stream(sid, f.ErrorCode.REFUSED_STREAM))
                return
            stream = self._streams[sid] = _Stream(self._core.open(), self._peer_window)
        if flags & END_STREAM and flags & END_HEADERS and stream.trailer is None:
            self._remote_end(sid, stream, out)

    def _on_continuation(self, sid: int, flags: int, out: list[bytes]) -> None:
        if sid != self._continuation:
            raise _ConnectionError(f.ErrorCode.PROTOCOL_ERROR, "CONTINUATION on another stream")
        if flags & f.END_HEADERS:
            self._continuation = None
            stream = self._streams.get(sid)
            if self._continuation_ends and stream is not None and stream.trailer is None:
                self._remote_end(sid, stream, out)

    def _on_reset(self, sid: int) -> None:
        stream = self._streams.pop(sid, None)
        if stream is not None:
            stream.ext.end(Outcome.SHUTDOWN if self.shutting_down else Outcome.STREAM_RESET)

    def _on_data(self, sid: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        self._recv_consumed += len(payload)
        stream = self._streams.get(sid)
        if stream is None or stream.trailer is not None:
            return  # a stream we already finished: only the connection window counts
        if flags & PADDED:
            pad = payload[0] if payload else 0
            payload = payload[1 : len(payload) - pad]
        stream.recv_consumed += len(payload)
        if stream.recv_consumed >= _REPLENISH:
            out.append(f.window_update(sid, stream.recv_consumed))
            stream.recv_consumed = 0
        stream.buf = stream.buf + payload if stream.buf else payload
        # While the stream waits for the pre-scheduling step, its messages stay buffered.
        if stream.task is None and not self._drain(sid, stream, out):
            return
        if flags & END_STREAM:
            self._remote_end(sid, stream, out)

    def _drain(self, sid: int, stream: _Stream, out: list[bytes]) -> bool:
        """Feed the complete messages of ``stream.buf``; False when the stream ended."""
        buf = stream.buf
        pos, end = 0, len(buf)
        while end - pos >= 5:
            compressed, size = _GRPC_PREFIX.unpack_from(buf, pos)
            if compressed:
                self._fail(sid, stream, _UNIMPLEMENTED, "compressed gRPC messages are not supported", out)
                return False
            if size > self._max_message:
                self._fail(sid, stream, _RESOURCE_EXHAUSTED, f"message of {size} bytes is too large", out)
                return False
            if end - pos - 5 < size:
                break
            try:
                message = ProcessingRequest.FromString(buf[pos + 5 : pos + 5 + size])
                responses = stream.ext.feed(message)
            except (DecodeError, RemoteProtocolError) as exc:
                _log.warning("ext_proc protocol error", error=str(exc))
                self._fail(sid, stream, _INVALID_ARGUMENT, str(exc) or "invalid ProcessingRequest", out)
                return False
            except Exception:
                _log.exception("ext_proc stream failed")
                self._fail(sid, stream, _INTERNAL, "internal error in the endpoint picker", out)
                return False
            pos += 5 + size
            if not self._queue(sid, stream, responses, out):
                return False
            if stream.ext.suspended:  # token-producer's render: the rest waits for it
                stream.task = task = asyncio.get_running_loop().create_task(self._settle(sid, stream))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                break
        stream.buf = buf[pos:]
        if stream.pending:
            self._flush(sid, stream, out)
        return True

    def _queue(
        self, sid: int, stream: _Stream, responses: list[ProcessingResponse], out: list[bytes]
    ) -> bool:
        """Queue ``responses`` for sending; False when the stream ended (an answer too large, or done)."""
        for response in responses:
            data = response.SerializeToString()
            if self._max_send and len(data) > self._max_send:
                message = f"trying to send message larger than max ({len(data)} vs. {self._max_send})"
                self._fail(sid, stream, _RESOURCE_EXHAUSTED, message, out)
                return False
            stream.pending += (len(data).to_bytes(5, "big"), data)  # gRPC prefix: uncompressed, length
            stream.pending_bytes += 5 + len(data)
        if stream.ext.finished:
            self._finish(sid, stream, _OK, "", _RESET, out)
            return False
        return True

    async def _settle(self, sid: int, stream: _Stream) -> None:
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
            self._fail(sid, stream, _INTERNAL, "internal error in the endpoint picker", out)
        elif self._queue(sid, stream, responses, out):
            self._drain(sid, stream, out)
        self._write(out)

    # -- stream endings ----------------------------------------------------------------------------

    def _remote_end(self, sid: int, stream: _Stream, out: list[bytes]) -> None:
        """The client finished sending: the stream ends (a request still open was cancelled)."""
        stream.remote_closed = True
        self._finish(sid, stream, _OK, "", _CANCELLED, out)

    def _fail(self, sid: int, stream: _Stream, status: int, message: str, out: list[bytes]) -> None:
        stream.pending.clear()
        stream.pending_bytes = 0
        self._finish(sid, stream, status, message, Outcome.STREAM_RESET, out)

    def _finish(
        self, sid: int, stream: _Stream, status: int, message: str, outcome: Outcome, out: list[bytes]
    ) -> None:
        stream.ext.end(outcome, status)
        if stream.trailer is None:
            stream.trailer = f.trailers(status, message)
            self._flush(sid, stream, out)

    def _flush(self, sid: int, stream: _Stream, out: list[bytes]) -> None:
        """Send what the windows allow; after the last byte, the trailers (and RST_STREAM NO_ERROR)."""
        pending = stream.pending
        if (pending or stream.trailer is not None) and not stream.headers_sent:
            out.append(frame(HEADERS, END_HEADERS, sid, RESPONSE_HEADERS))
            stream.headers_sent = True
        if pending:
            size = stream.pending_bytes
            if size <= self._peer_max_frame and size <= self._send_window and size <= stream.window:
                # the usual case: everything fits in one DATA frame, whose payload is ``pending`` as is
                out.append(_FRAME_HEADER.pack(size >> 16, size & 0xFFFF, DATA, 0, sid))
                out += pending
                pending.clear()
            else:
                data, pos = b"".join(pending), 0
                pending.clear()
                while pos < size:
                    n = min(size - pos, self._peer_max_frame, self._send_window, stream.window)
                    if n <= 0:
                        break
                    out.append(frame(DATA, 0, sid, data[pos : pos + n]))
                    pos += n
                    self._send_window -= n
                    stream.window -= n
                if pos < size:  # the rest waits for a WINDOW_UPDATE (trailers after it)
                    pending.append(data[pos:])
                    stream.pending_bytes = size - pos
                    return
                size = 0  # windows already charged
            stream.pending_bytes = 0
            self._send_window -= size
            stream.window -= size
        if stream.trailer is not None:
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, sid, stream.trailer))
            if not stream.remote_closed:
                out.append(f.rst_stream(sid, f.ErrorCode.NO_ERROR))
            self._streams.pop(sid, None)
