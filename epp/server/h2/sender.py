"""The sending side of the HTTP/2 core's streams: per-stream state, answers queued under the peer's
windows, and every way a stream ends (trailers, RST_STREAM, the memory budget's accounting).

:class:`StreamSender` is a mix-in of :class:`~epp.server.h2.core.H2Core`, which owns the attributes
declared on it; it is split out only to keep each module readable. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse

from epp.server.h2 import frames as f
from epp.server.h2.events import TRANSITIONS, DeadlineCleared, Event, ExtProcHandler, StreamState
from epp.server.h2.frames import (
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_HEADER,
    GRPC_OK,
    GRPC_RESOURCE_EXHAUSTED,
    HEADERS,
    RESPONSE_HEADERS,
    frame,
)
from scheduler.types import Outcome

__all__ = ["H2Stream", "StreamSender"]

# Enum members as globals (cheaper to load than Enum attributes), named after the member; the core's
# modules use these names only.
_CLIENT_CANCEL, _STREAM_RESET = Outcome.CLIENT_CANCEL, Outcome.STREAM_RESET
_DECODE_PROCESSING = ProcessingRequest.FromString
_OPEN, _SUSPENDED, _CLOSING, _CLOSED = (
    StreamState.OPEN, StreamState.SUSPENDED, StreamState.CLOSING, StreamState.CLOSED
)  # fmt: skip


class H2Stream:
    """One open stream: its ext_proc stream, receive buffer and windows, and answers not yet sent."""

    __slots__ = (
        "buf",
        "call",
        "commit",
        "deadline",
        "decode",
        "ext",
        "headers_sent",
        "need",
        "pending",
        "pending_bytes",
        "queued",
        "recv_window",
        "remote_closed",
        "state",
        "trailer",
        "window",
    )

    def __init__(self, ext: ExtProcHandler, window: int, recv_window: int) -> None:
        self.state = _OPEN
        self.ext = ext
        self.buf: bytes | bytearray = b""  # received bytes of messages not yet complete
        self.need = 0  # len(buf) needed before the next message can be complete
        self.commit = 0  # bytes of a large message granted beyond the stream window (budget reservation)
        self.window = window  # what we may send
        self.recv_window = recv_window  # what the peer may send
        self.pending: list[bytes] = []  # gRPC-framed messages (prefix, body, ...) waiting to be sent
        self.pending_bytes = 0
        self.queued = 0  # pending bytes counted in the connection's budget
        self.trailer = b""  # CLOSING: the trailers to send once ``pending`` is flushed
        self.deadline = False  # a grpc-timeout timer is armed (DeadlineSet sent)
        self.headers_sent = False
        self.remote_closed = False  # the client sent END_STREAM (half-closed remote)
        self.decode: Callable[[bytes | bytearray], Any] = _DECODE_PROCESSING  # message bytes -> message
        self.call: object = None  # a health call (epp.server.h2.health); None: an ext_proc stream

    def move(self, state: StreamState) -> None:
        """Change state; a transition :data:`~epp.server.h2.events.TRANSITIONS` lacks is a bug."""
        if state not in TRANSITIONS[self.state]:
            raise AssertionError(f"stream state {self.state.name} -> {state.name}")
        self.state = state


class StreamSender:
    """Queueing, flushing and ending streams (see the module docstring)."""

    _streams: dict[int, H2Stream]
    events: list[Event]
    _max_send: int
    _budget: int
    _held: int
    _queued: int
    _reserved: int
    _send_window: int
    _peer_max_frame: int
    _call_half_closed: Callable[[int, H2Stream, list[bytes]], None]  # a health call's (HealthServing)

    def _queue(
        self, sid: int, stream: H2Stream, responses: list[ProcessingResponse], out: list[bytes]
    ) -> bool:
        """Queue ``responses`` for sending; False when the stream ended (an answer too large, or done)."""
        for response in responses:
            data = response.SerializeToString()
            if self._max_send and len(data) > self._max_send:
                message = f"trying to send message larger than max ({len(data)} vs. {self._max_send})"
                self._fail(sid, stream, GRPC_RESOURCE_EXHAUSTED, message, out)
                return False
            stream.pending += (len(data).to_bytes(5, "big"), data)  # gRPC prefix: uncompressed, length
            stream.pending_bytes += 5 + len(data)
        if stream.ext.finished:
            self._finish(sid, stream, GRPC_OK, "", _STREAM_RESET, out)
            return False
        return True

    # -- stream endings ----------------------------------------------------------------------------

    def _drop(self, sid: int, stream: H2Stream) -> None:
        """Forget a stream (CLOSED): its buffers leave the budget, its deadline is cleared."""
        if self._streams.pop(sid, None) is None:
            return
        stream.state = _CLOSED  # allowed from every state (TRANSITIONS); set inline on the hot path
        self._held -= len(stream.buf)
        stream.buf = b""
        self._reserved -= stream.commit
        self._queued -= stream.queued
        stream.commit = stream.queued = 0
        if stream.deadline:
            stream.deadline = False
            self.events.append(DeadlineCleared(sid))

    def _reset(self, sid: int, stream: H2Stream, code: int, out: list[bytes]) -> None:
        """A stream error (RFC 9113 5.4.2): RST_STREAM with ``code``; a dispatched request is reset."""
        self._drop(sid, stream)
        stream.ext.end(_STREAM_RESET)
        out.append(f.rst_stream(sid, code))

    def _remote_end(self, sid: int, stream: H2Stream, out: list[bytes]) -> None:
        """The client finished sending: an ext_proc stream ends (a request still open was cancelled); a
        health call decides itself (:meth:`_call_half_closed`)."""
        stream.remote_closed = True
        if stream.call is None:
            self._finish(sid, stream, GRPC_OK, "", _CLIENT_CANCEL, out)
        else:
            self._call_half_closed(sid, stream, out)

    def _fail(
        self,
        sid: int,
        stream: H2Stream,
        status: int,
        msg: str,
        out: list[bytes],
        outcome: Outcome = _STREAM_RESET,
    ) -> None:
        stream.pending.clear()
        stream.pending_bytes = 0
        self._finish(sid, stream, status, msg, outcome, out)

    def _finish(
        self, sid: int, stream: H2Stream, status: int, message: str, outcome: Outcome, out: list[bytes]
    ) -> None:
        stream.ext.end(outcome, status)
        if stream.state is not _CLOSING:
            stream.state = _CLOSING  # from OPEN or SUSPENDED, both allowed (TRANSITIONS): set inline
            stream.trailer = f.trailers(status, message)
            self._held -= len(stream.buf)  # nothing more is read from this stream
            stream.buf = b""
            self._flush(sid, stream, out)

    def _flush(self, sid: int, stream: H2Stream, out: list[bytes]) -> None:
        """Send what the windows allow; after the last byte, the trailers (and RST_STREAM NO_ERROR)."""
        pending = stream.pending
        closing = stream.state is _CLOSING
        if (pending or closing) and not stream.headers_sent:
            out.append(frame(HEADERS, END_HEADERS, sid, RESPONSE_HEADERS))
            stream.headers_sent = True
        if pending:
            size = stream.pending_bytes
            if size <= self._peer_max_frame and size <= self._send_window and size <= stream.window:
                # the usual case: everything fits in one DATA frame, whose payload is ``pending`` as is
                out.append(FRAME_HEADER.pack(size >> 16, size & 0xFFFF, DATA, 0, sid))
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
                    self._queued += size - pos - stream.queued
                    stream.queued = size - pos
                    if self._held + self._queued > self._budget and not closing:
                        message = f"queued answers: over the memory budget ({self._budget} bytes)"
                        self._fail(sid, stream, GRPC_RESOURCE_EXHAUSTED, message, out)
                    return
                size = 0  # windows already charged
            stream.pending_bytes = 0
            self._send_window -= size
            stream.window -= size
        if stream.queued:
            self._queued -= stream.queued
            stream.queued = 0
        if closing:
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, sid, stream.trailer))
            if not stream.remote_closed:
                out.append(f.rst_stream(sid, f.ErrorCode.NO_ERROR))
            self._drop(sid, stream)
