"""The receiving side of the HTTP/2 core's streams: DATA frames assembled into gRPC messages, each
decoded (``ProcessingRequest``) and fed to its ext_proc stream, errors mapped to gRPC statuses, and the
receive windows replenished as messages are consumed.

:class:`MessageReader` is a mix-in of :class:`~epp.server.h2.core.H2Core`, which owns the attributes
declared on it; it is split out only to keep each module readable. Pure: no I/O, no clock; the ext_proc
stream it feeds (:class:`~epp.server.stream.ExtProcStream`) is itself a synchronous state machine, so
answers are queued in the same call as the message that caused them.

Error mapping (the stream ends, the connection goes on): a compressed message -> UNIMPLEMENTED; a message
over ``max_message_bytes``, or larger than the stream window while the connection budget cannot hold it
-> RESOURCE_EXHAUSTED; undecodable bytes or an ext_proc protocol violation -> INVALID_ARGUMENT; an
exception of the ext_proc stream (a bug) -> INTERNAL.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import structlog
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingResponse
from google.protobuf.message import DecodeError

from epp.protocol import RemoteProtocolError
from epp.server.h2 import frames as f
from epp.server.h2.events import Event, StreamError, Suspended
from epp.server.h2.frames import (
    END_STREAM,
    GRPC_INTERNAL,
    GRPC_INVALID_ARGUMENT,
    GRPC_RESOURCE_EXHAUSTED,
    GRPC_UNIMPLEMENTED,
    PADDED,
)
from epp.server.h2.limits import H2Limits
from epp.server.h2.sender import _CLOSING, _OPEN, _SUSPENDED, H2Stream, StreamSender

__all__ = ["GoAwayError", "MessageReader"]

_log = structlog.get_logger("epp.h2")
_GRPC_PREFIX = struct.Struct(">BI")  # compressed flag, message length
_E = f.ErrorCode


class GoAwayError(Exception):
    """A connection error (RFC 9113 section 5.4.1): GOAWAY with ``code``, then the connection closes."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class MessageReader(StreamSender):
    """DATA frames to ext_proc messages (see the module docstring)."""

    _limits: H2Limits
    _max_message: int
    _stream_window: int
    _recv_window: int
    _last_stream: int
    _tokens: float
    events: list[Event]
    _spend: Callable[[], None]  # H2Core's flood accounting: one unproductive control frame

    def _on_data(self, sid: int, flags: int, payload: bytes, out: list[bytes]) -> None:
        n = len(payload)
        self._recv_window -= n
        if self._recv_window < 0:
            raise GoAwayError(_E.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        if n == 0 and not flags & END_STREAM:
            self._spend()
        stream = self._streams.get(sid)
        if stream is None or stream.state is _CLOSING:
            if sid == 0 or sid > self._last_stream:
                raise GoAwayError(_E.PROTOCOL_ERROR, f"DATA on idle stream {sid}")
            return  # a stream we already finished: only the connection window counts
        stream.recv_window -= n
        if stream.recv_window < 0:
            self._reset(sid, stream, _E.FLOW_CONTROL_ERROR, out)
            return
        if flags & PADDED:
            pad = payload[0] if payload else 0
            if pad >= n:
                raise GoAwayError(_E.PROTOCOL_ERROR, "DATA padding larger than the frame")
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
        # While the stream is SUSPENDED, its messages stay buffered.
        if stream.state is _OPEN and len(buf) >= stream.need and not self._drain(sid, stream, out):
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
                message = stream.decode(buf[pos + 5 : pos + 5 + size])
                responses = stream.ext.feed(message)
            except (DecodeError, RemoteProtocolError) as exc:
                _log.warning("ext_proc protocol error", error=str(exc))
                self._fail(sid, stream, GRPC_INVALID_ARGUMENT, str(exc) or "invalid ProcessingRequest", out)
                return False
            except StreamError as exc:
                self._fail(sid, stream, exc.status, exc.message, out)
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
            if stream.ext.suspended:  # token-producer's render or flow control: the rest waits for it
                stream.move(_SUSPENDED)
                self.events.append(Suspended(sid, stream.ext))
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

    def settled(self, sid: int, responses: list[ProcessingResponse] | None) -> bytes:
        """A :class:`~epp.server.h2.events.Suspended` stream's wait is over: send ``responses`` (None: the
        wait raised, the stream ends INTERNAL) and go on with its buffered messages. Nothing happens if
        the stream ended meanwhile (reset, deadline, shutdown). Returns the bytes to send."""
        stream = self._streams.get(sid)
        if stream is None or stream.state is not _SUSPENDED:
            return b""
        stream.move(_OPEN)
        out: list[bytes] = []
        if responses is None:
            self._fail(sid, stream, GRPC_INTERNAL, "internal error in the endpoint picker", out)
        elif self._queue(sid, stream, responses, out):
            if stream.ext.suspended:  # waits again (a health Watch, until its next change)
                stream.move(_SUSPENDED)
                self.events.append(Suspended(sid, stream.ext))
                if stream.pending:
                    self._flush(sid, stream, out)
            else:
                self._drain(sid, stream, out)
        return b"".join(out)
