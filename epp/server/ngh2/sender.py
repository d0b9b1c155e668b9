"""The sending side of the ngh2 engine's streams: per-stream state, answers handed to nghttp2 within the
peer's windows (the rest waits here, counted against the memory budget), and every way a stream ends
(trailers, the grant and deadline released). :class:`NgH2Sender` is a mix-in of
:class:`~epp.server.ngh2.connection.NgH2Connection`, which owns the attributes declared on it; it is split
out only to keep each module readable (as :mod:`epp.server.h2.sender` is for the h2 engine).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import ngh2
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest

from epp.server.h2.events import ExtProcHandler
from epp.server.h2.frames import GRPC_DEADLINE_EXCEEDED, GRPC_OK, GRPC_RESOURCE_EXHAUSTED
from epp.server.h2.health import HealthCall
from scheduler.types import Outcome

__all__ = ["RESPONSE_HEADERS", "NgH2Sender", "NgStream", "trailers"]

RESPONSE_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]
_OK_TRAILERS = [(b"grpc-status", b"0")]
_RESET, _SHUTDOWN, _TIMEOUT = Outcome.STREAM_RESET, Outcome.SHUTDOWN, Outcome.TIMEOUT
_DECODE = ProcessingRequest.FromString


def trailers(status: int, message: str) -> list[tuple[bytes, bytes]]:
    if status == GRPC_OK and not message:
        return _OK_TRAILERS
    out = [(b"grpc-status", str(status).encode())]
    if message:
        out.append(
            (b"grpc-message", quote(message, safe=" !#$&'()*+,/:;=?@[]~").encode())
        )  # as frames.trailers
    return out


class NgStream:
    """One open stream: its handler, received bytes not yet consumed, answers waiting for the windows."""

    __slots__ = (
        "buf", "call", "closing", "commit", "decode", "ext", "handed", "handed_in", "headers_sent", "need",
        "pending", "pending_bytes", "remote_closed", "suspended", "target", "trailer",
    )  # fmt: skip

    def __init__(self, ext: ExtProcHandler, window: int) -> None:
        self.ext = ext
        self.target = window  # the stream's receive window (nghttp2's local window size)
        self.buf: bytes | bytearray = b""  # received, not consumed (= not acknowledged to nghttp2)
        self.need = 5  # len(buf) needed before the next message can be complete
        self.commit = 0  # bytes of a large message granted beyond the stream window
        self.pending: list[bytes] = []  # gRPC-framed answers waiting for the peer's windows
        self.pending_bytes = 0
        self.handed = 0  # bytes handed to nghttp2 since its data_to_send number ``handed_in``
        self.handed_in = -1
        self.closing = False  # trailers decided; sent once ``pending`` is
        self.trailer: list[tuple[bytes, bytes]] = _OK_TRAILERS
        self.headers_sent = False
        self.remote_closed = False
        self.suspended = False  # a settle task runs; later messages stay buffered
        self.decode: Any = _DECODE
        self.call: HealthCall | None = None


class NgH2Sender:
    """Queueing, sending and ending streams (see the module docstring)."""

    _conn: ngh2.Connection
    _streams: dict[int, NgStream]
    _deadlines: dict[int, asyncio.TimerHandle]
    _finishing: list[int]
    _waiting: set[int]
    _max_send: int
    _budget: int
    _held: int
    _queued: int
    _reserved: int
    _handed: int
    _flushes: int
    closed: bool
    shutting_down: bool
    _ack: Callable[[int, int], None]  # the connection's: consumed bytes acknowledged to nghttp2
    _flush: Callable[[], None]  # the connection's: write what nghttp2 has ready

    # -- sending -----------------------------------------------------------------------------------

    def _queue(self, sid: int, stream: NgStream, responses: list[Any]) -> bool:
        """Queue ``responses`` (the caller sends them, once for all the messages of a read); False when the
        stream ended (an answer too large, or the stream done: then they were sent with the trailers)."""
        if responses:
            for response in responses:
                data = response.SerializeToString()
                if self._max_send and len(data) > self._max_send:
                    message = f"trying to send message larger than max ({len(data)} vs. {self._max_send})"
                    self._fail(sid, stream, GRPC_RESOURCE_EXHAUSTED, message)
                    return False
                stream.pending += (len(data).to_bytes(5, "big"), data)
                stream.pending_bytes += 5 + len(data)
        if stream.ext.finished:
            self._finish(sid, stream, GRPC_OK, "", _RESET)
            return False
        return True

    def _send(self, sid: int, stream: NgStream) -> None:
        """Hand nghttp2 what the peer's windows allow (the rest waits here), then the trailers once all
        is handed over and the stream is closing."""
        try:
            conn = self._conn
            if not stream.headers_sent:
                conn.send_response(sid, RESPONSE_HEADERS)
                stream.headers_sent = True
            size = stream.pending_bytes
            if size:
                # the peer's windows less what was handed to nghttp2 since the last data_to_send (it charges
                # the windows as it frames the data there)
                handed = stream.handed if stream.handed_in == self._flushes else 0
                room = conn.stream_remote_window_size(sid) - handed
                room = min(room, conn.remote_window_size - self._handed)
                pending = stream.pending
                if size > room:  # the rest waits here for a WINDOW_UPDATE (the trailers after it)
                    data = b"".join(pending)
                    pending.clear()
                    if room > 0:
                        conn.send_data(sid, data[:room])
                        data = data[room:]
                        self._handed += room
                        stream.handed, stream.handed_in = handed + room, self._flushes
                    pending.append(data)
                    stream.pending_bytes = len(data)
                    self._waiting.add(sid)
                    self._recount()
                    if self._held + self._queued > self._budget and not stream.closing:
                        message = f"queued answers: over the memory budget ({self._budget} bytes)"
                        self._fail(sid, stream, GRPC_RESOURCE_EXHAUSTED, message)
                    return
                conn.send_data(sid, pending[0] if len(pending) == 1 else b"".join(pending))
                self._handed += size
                stream.handed, stream.handed_in = handed + size, self._flushes
                pending.clear()
                stream.pending_bytes = 0
            if sid in self._waiting:
                self._waiting.discard(sid)
                self._recount()
            if stream.closing:
                conn.send_trailers(sid, stream.trailer)
                self._drop(sid, stream)
                if not stream.remote_closed:
                    self._finishing.append(sid)
        except ngh2.NGH2Error:  # nghttp2 closed the stream (its event follows) or the connection failed
            if self._streams.get(sid) is stream:
                self._drop(sid, stream)
            stream.ext.end(_SHUTDOWN if self.shutting_down else _RESET)

    def _recount(self) -> None:
        self._queued = sum(s.pending_bytes for s in map(self._streams.get, self._waiting) if s is not None)

    def _resume_waiting(self) -> None:
        """A WINDOW_UPDATE or new SETTINGS: streams with waiting answers send what now fits."""
        for sid in list(self._waiting):
            stream = self._streams.get(sid)
            if stream is None:
                self._waiting.discard(sid)
            else:
                self._send(sid, stream)

    # -- stream endings ----------------------------------------------------------------------------

    def _drop(self, sid: int, stream: NgStream) -> None:
        """Forget a stream: its unconsumed bytes go back to the peer, its grant and deadline end."""
        if self._streams.pop(sid, None) is None:
            return
        if stream.buf:
            self._held -= len(stream.buf)
            self._ack(len(stream.buf), sid)
            stream.buf = b""
        self._reserved -= stream.commit
        stream.commit = 0
        if self._waiting:
            self._waiting.discard(sid)
            self._recount()
        timer = self._deadlines.pop(sid, None)
        if timer is not None:
            timer.cancel()

    def _fail(self, sid: int, stream: NgStream, status: int, message: str, outcome: Outcome = _RESET) -> None:
        stream.pending.clear()
        stream.pending_bytes = 0
        self._finish(sid, stream, status, message, outcome)

    def _finish(self, sid: int, stream: NgStream, status: int, message: str, outcome: Outcome) -> None:
        stream.ext.end(outcome, status)
        if not stream.closing:
            stream.closing = True
            stream.trailer = trailers(status, message)
            if stream.buf:  # nothing more is read from this stream
                self._held -= len(stream.buf)
                self._ack(len(stream.buf), sid)
                stream.buf = b""
            self._send(sid, stream)

    def _expire(self, sid: int) -> None:
        """Stream ``sid``'s ``grpc-timeout`` passed: DEADLINE_EXCEEDED (outcome TIMEOUT), also when its
        trailers were decided but answers still wait for the peer's window (those are dropped)."""
        self._deadlines.pop(sid, None)
        stream = self._streams.get(sid)
        if stream is None or self.closed:
            return
        if stream.closing:
            stream.pending.clear()
            stream.pending_bytes = 0
            stream.trailer = trailers(GRPC_DEADLINE_EXCEEDED, "Deadline Exceeded")
            stream.ext.end(_TIMEOUT, GRPC_DEADLINE_EXCEEDED)
            self._send(sid, stream)
        else:
            self._fail(sid, stream, GRPC_DEADLINE_EXCEEDED, "Deadline Exceeded", _TIMEOUT)
        self._flush()
