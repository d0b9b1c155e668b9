"""The receiving side of the ngh2 engine's streams: gRPC messages cut from the bytes nghttp2 hands over, fed
to the ext_proc streams and acknowledged only as they are consumed (manual flow control), grants for
messages larger than the stream window, the connection window's top-up, and the async waits of suspended
streams. :class:`NgH2Reader` is a mix-in of :class:`~epp.server.ngh2.connection.NgH2Connection`, which owns
the attributes declared on it; it is split out only to keep each module readable (as
:mod:`epp.server.h2.reader` is for the h2 engine).
"""

from __future__ import annotations

import asyncio
import struct

import ngh2
import structlog
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingResponse
from google.protobuf.message import DecodeError

from epp.protocol import RemoteProtocolError
from epp.server.h2.events import StreamError
from epp.server.h2.frames import (
    GRPC_INTERNAL,
    GRPC_INVALID_ARGUMENT,
    GRPC_RESOURCE_EXHAUSTED,
    GRPC_UNIMPLEMENTED,
)
from epp.server.h2.limits import H2Limits
from epp.server.ngh2.sender import NgH2Sender, NgStream

__all__ = ["NgH2Reader"]

_log = structlog.get_logger("epp.ngh2")
_GRPC_PREFIX = struct.Struct(">BI")  # compressed flag, message length


class NgH2Reader(NgH2Sender):
    """Reading messages and settling suspended streams (see the module docstring)."""

    _limits: H2Limits
    _max_message: int
    _stream_window: int
    _conn_target: int
    _tokens: float
    _tasks: set[asyncio.Task[None]]
    _transport: asyncio.Transport | None

    def _drain(self, sid: int, stream: NgStream) -> bool:
        """Feed the complete messages of ``stream.buf``; False when the stream ended."""
        buf = stream.buf
        pos, end, need = 0, len(buf), 5
        ext = stream.ext
        while end - pos >= 5:
            compressed, size = _GRPC_PREFIX.unpack_from(buf, pos)
            if compressed:
                self._fail(sid, stream, GRPC_UNIMPLEMENTED, "compressed gRPC messages are not supported")
                return False
            if size > self._max_message:
                self._fail(sid, stream, GRPC_RESOURCE_EXHAUSTED, f"message of {size} bytes is too large")
                return False
            if end - pos - 5 < size:
                need = 5 + size
                break
            try:
                responses = ext.feed(stream.decode(buf[pos + 5 : pos + 5 + size]))
            except (DecodeError, RemoteProtocolError) as exc:
                _log.warning("ext_proc protocol error", error=str(exc))
                self._fail(sid, stream, GRPC_INVALID_ARGUMENT, str(exc) or "invalid ProcessingRequest")
                return False
            except StreamError as exc:
                self._fail(sid, stream, exc.status, exc.message)
                return False
            except Exception:
                _log.exception("ext_proc stream failed")
                self._fail(sid, stream, GRPC_INTERNAL, "internal error in the endpoint picker")
                return False
            pos += 5 + size
            if self._tokens < self._limits.flood_rate:
                self._tokens += 1  # a message received: a productive frame
            if stream.commit:
                self._reserved -= stream.commit
                stream.commit = 0
            if not self._queue(sid, stream, responses):
                return False  # the stream ended: its whole buffer was given back
            if ext.suspended:  # an async step: the rest waits for it
                self._suspend(sid, stream)
                need = 0
                break
        if pos:  # consumed: those bytes go back to the peer's windows
            self._held -= pos
            try:
                self._conn.acknowledge_received_data(pos, sid)
            except ngh2.NGH2Error:
                pass  # the connection already failed
            if pos == end:
                stream.buf = buf = b""
            elif type(buf) is bytearray:
                del buf[:pos]
            else:
                stream.buf = buf = bytearray(buf[pos:])
        stream.need = need
        if stream.pending_bytes:
            self._send(sid, stream)
            if stream.closing:  # over the budget
                return False
        if not buf:
            return True
        # a partial message: a message larger than the stream window is granted if the budget holds it
        if need > self._stream_window and need > stream.commit and not self._reserve(sid, stream, need):
            return False
        # its rest must fit in the stream window: nghttp2 announces consumed bytes only once they reach half
        # the window, so the window grows by what is short (as the h2 engine's WINDOW_UPDATE of the rest)
        try:
            short = need - len(buf) - self._conn.stream_local_window_size(sid)
            if short > 0:
                stream.target += short
                self._conn.set_local_window_size(stream.target, stream_id=sid)
        except ngh2.NGH2Error:
            pass  # nghttp2 closed the stream: its end arrives as an event
        return True

    def _reserve(self, sid: int, stream: NgStream, need: int) -> bool:
        """Grant a message larger than the stream window if the connection budget can hold it."""
        others = self._held - len(stream.buf) + self._queued + self._reserved - stream.commit
        if others + need > self._budget:
            message = f"message of {need - 5} bytes: over the connection memory budget ({self._budget} bytes)"
            self._fail(sid, stream, GRPC_RESOURCE_EXHAUSTED, message)
            return False
        self._reserved += need - stream.commit
        stream.commit = need
        return True

    def _top_up(self) -> None:
        """While partial messages are held: the connection window what the budget can hold again, as the
        h2 engine keeps it (budget - held - queued), every quarter of the budget or when it runs low.
        nghttp2 announces consumed bytes only once they reach half its window, so without this a connection
        whose partial messages fill half the budget could stall. The target stays under twice the budget
        (what nghttp2 has not announced is under half of it)."""
        remaining = self._conn.local_window_size
        budget = self._budget
        grant = budget - self._held - self._queued - remaining
        if grant > 0 and (grant >= budget >> 2 or remaining < budget >> 2):
            self._conn_target += grant
            self._conn.set_local_window_size(self._conn_target)

    def _suspend(self, sid: int, stream: NgStream) -> None:
        stream.suspended = True
        task = asyncio.get_running_loop().create_task(self._settle(sid, stream))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle(self, sid: int, stream: NgStream) -> None:
        """Await a suspended stream's wait, then send its answers and go on with its buffered messages."""
        responses: list[ProcessingResponse] | None
        try:
            responses = await stream.ext.settle()
        except Exception:
            _log.exception("ext_proc pre-scheduling step failed")
            responses = None
        if self._transport is None or self.closed or self._streams.get(sid) is not stream or stream.closing:
            return
        stream.suspended = False
        if responses is None:
            self._fail(sid, stream, GRPC_INTERNAL, "internal error in the endpoint picker")
        elif self._queue(sid, stream, responses):
            if stream.ext.suspended:  # waits again (a health Watch, until its next change)
                self._suspend(sid, stream)
            if stream.buf and not stream.suspended:
                self._drain(sid, stream)  # sends what is queued too
            elif stream.pending_bytes:
                self._send(sid, stream)
        self._flush()
