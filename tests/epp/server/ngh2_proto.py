"""A prototype ext_proc connection on ``ngh2`` (sans-I/O HTTP/2 over libnghttp2), for measurement only.

Issue 12 asks whether nghttp2's hardened protocol core could replace our own at a CPU cost within 10 % per
request. This drives the same :class:`~epp.server.stream.ExtProcStream` as ``H2Connection`` with ngh2 doing
all framing, HPACK, flow control (its automatic WINDOW_UPDATEs) and flood policing, and does the same
per-request work as ours where it costs CPU: the ``:path`` and content-type checks, gRPC framing, one
``transport.write`` per socket read, trailers ``grpc-status: 0`` once the stream is finished and then
RST_STREAM NO_ERROR, gRPC errors for undecodable or protocol-violating messages, write backpressure.
Left out (they cost nothing per ordinary request): ``grpc-timeout``, compressed-message and size errors
beyond a plain check, the settings and idle timeouts, a graceful drain beyond GOAWAY.

Why the first version failed behind Envoy (every request 500, Envoy: ``upstream_reset_after_response_started
{remote_reset}``): it queued the trailers and then ``reset_stream(sid, NO_ERROR)`` in the same batch, and
nghttp2 sends RST_STREAM (a control frame) before the stream's queued DATA and trailers, so Envoy saw the
reset before ``grpc-status``. Here the reset is submitted only once ngh2 has taken the stream's body and
trailers out of its queue (:meth:`NgH2Connection._flush`).

Used by ``inproc_bench.py --engine ngh2`` (same harness as ours) and, through ``ngh2_picker.py``, in place
of ``H2Connection`` in ``H2Server`` behind the real Envoy (``epp-bench extproc-envoy --picker-script``).
``ngh2`` is not a dependency; install it by hand to run this.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import structlog
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse
from google.protobuf.message import DecodeError

from epp.protocol import RemoteProtocolError
from epp.server.h2.limits import H2Limits
from epp.server.stream import ExtProcStream, StreamCore
from scheduler.types import Outcome

__all__ = ["NgH2Connection"]

ngh2: Any = importlib.import_module("ngh2")  # not a dependency: installed by hand to run this

_log = structlog.get_logger("epp.ngh2")
_PATH = b"/envoy.service.ext_proc.v3.ExternalProcessor/Process"
_RESPONSE = [(b":status", b"200"), (b"content-type", b"application/grpc")]
_OK = [(b"grpc-status", b"0")]
_CANCEL, _RESET, _SHUTDOWN = Outcome.CLIENT_CANCEL, Outcome.STREAM_RESET, Outcome.SHUTDOWN
_INVALID_ARGUMENT, _UNIMPLEMENTED, _INTERNAL, _RESOURCE_EXHAUSTED = 3, 12, 13, 8
# Envoy resets every ext_proc stream once it is done with it (RST_STREAM INTERNAL_ERROR, seen with both
# engines), so nghttp2's default rapid-reset bucket (1000 burst, 33 a second) ends Envoy's connection with
# GOAWAY after about 1000 requests at more than 33 requests a second (Envoy then fails the streams above the
# GOAWAY's last stream id: HTTP 500 with the fail-closed config). Sized above the picker's maximum request
# rate on one connection (about 1,300 a second), still a bound on a rapid-reset attacker.
_RESET_RATE_LIMIT = (10_000, 5_000)
_DataReceived, _RequestReceived = ngh2.DataReceived, ngh2.RequestReceived
_StreamReset, _StreamClosed, _ConnectionClosed = ngh2.StreamReset, ngh2.StreamClosed, ngh2.ConnectionClosed


class _Stream:
    __slots__ = ("buf", "ext", "task")

    def __init__(self, ext: ExtProcStream) -> None:
        self.ext = ext
        self.buf = bytearray()
        self.task: asyncio.Task[None] | None = None


class NgH2Connection(asyncio.Protocol):
    """``H2Connection``'s constructor shape and server-facing surface, on ngh2."""

    def __init__(
        self,
        core: StreamCore,
        max_message_bytes: int = 4 << 20,
        *,
        on_close: Any = None,
        limits: H2Limits | None = None,
        **_: object,
    ) -> None:
        self._core = core
        self._max_message = max_message_bytes
        self._on_close = on_close
        self._limits = limits or H2Limits()
        self.shutting_down = False
        self._conn = ngh2.Connection(
            ngh2.Role.SERVER,
            ngh2.Configuration(
                max_inbound_header_list_size=self._limits.max_header_list_size,
                stream_reset_rate_limit=_RESET_RATE_LIMIT,
            ),
        )
        self._streams: dict[int, _Stream] = {}
        self._finishing: list[int] = []  # trailers queued: RST_STREAM once ngh2 has sent them
        self._transport: Any = None

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        limits = self._limits
        if hasattr(transport, "set_write_buffer_limits"):
            transport.set_write_buffer_limits(high=limits.write_buffer)
        S = ngh2.Setting
        self._conn.initiate_connection({
            S.MAX_CONCURRENT_STREAMS: limits.max_concurrent_streams,
            S.INITIAL_WINDOW_SIZE: limits.stream_window,
            S.MAX_HEADER_LIST_SIZE: limits.max_header_list_size,
        })  # fmt: skip
        self._conn.set_local_window_size(limits.connection_budget)
        transport.write(self._conn.data_to_send())

    def connection_lost(self, exc: Exception | None) -> None:
        outcome = _SHUTDOWN if self.shutting_down else _RESET
        for stream in self._streams.values():
            if stream.task is not None:
                stream.task.cancel()
            stream.ext.end(outcome)
        self._streams.clear()
        self._transport = None
        if self._on_close is not None:
            self._on_close(self)

    def pause_writing(self) -> None:  # the peer does not read: stop reading too
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    def goaway(self) -> None:
        self.shutting_down = True
        if self._transport is not None:
            self._conn.send_shutdown_notice()
            self._transport.write(self._conn.data_to_send())

    def abort_all(self) -> None:
        self.shutting_down = True
        transport = self._transport
        self.connection_lost(None)
        if transport is not None:
            transport.close()

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        try:
            conn.receive_data(data)
        except ngh2.NGH2Error as exc:  # fatal violations and floods: ngh2 has queued GOAWAY
            _log.warning("ngh2 connection error", error=str(exc))
        streams = self._streams
        for event in conn.events():
            kind = type(event)
            if kind is _DataReceived:
                sid = event.stream_id
                stream = streams.get(sid)
                if stream is not None:
                    if event.data:
                        stream.buf += event.data
                        if stream.task is None:
                            self._drain(sid, stream)
                    if event.end_stream and sid in streams:
                        del streams[sid]
                        stream.ext.end(_CANCEL)
                        if stream.task is not None:
                            stream.task.cancel()
                        conn.send_trailers(sid, _OK)
            elif kind is _RequestReceived:
                self._open(event.stream_id, event.headers, event.end_stream)
            elif kind is _StreamReset or kind is _StreamClosed:
                stream = streams.pop(event.stream_id, None)
                if stream is not None:
                    if stream.task is not None:
                        stream.task.cancel()
                    stream.ext.end(_SHUTDOWN if self.shutting_down else _RESET)
            elif kind is _ConnectionClosed:
                self._flush()
                if self._transport is not None:
                    self._transport.close()
                return
        self._flush()

    def _open(self, sid: int, headers: Any, end_stream: bool) -> None:
        path = content_type = b""
        for name, value in headers:
            if name == b":path":
                path = value
            elif name == b"content-type":
                content_type = value
        conn = self._conn
        if not content_type.startswith(b"application/grpc"):
            conn.send_response(sid, [(b":status", b"415")], end_stream=True)
            return
        if path != _PATH:
            conn.send_response(sid, [*_RESPONSE, (b"grpc-status", b"12")], end_stream=True)
            return
        if self.shutting_down:
            conn.reset_stream(sid, 7)  # REFUSED_STREAM
            return
        self._streams[sid] = _Stream(self._core.open())
        conn.send_response(sid, _RESPONSE)
        if end_stream:
            self._finish(sid, self._streams.pop(sid), _CANCEL, 0)

    def _drain(self, sid: int, stream: _Stream) -> None:
        """Feed the complete gRPC messages of ``stream.buf``; stops at a suspended or finished stream."""
        buf, ext = stream.buf, stream.ext
        pos, end = 0, len(buf)
        while end - pos >= 5:
            if buf[pos]:
                self._fail(sid, stream, _UNIMPLEMENTED, "compressed gRPC messages are not supported")
                return
            size = int.from_bytes(buf[pos + 1 : pos + 5], "big")
            if size > self._max_message:
                self._fail(sid, stream, _RESOURCE_EXHAUSTED, f"message of {size} bytes is too large")
                return
            if end - pos - 5 < size:
                break
            try:
                responses = ext.feed(ProcessingRequest.FromString(buf[pos + 5 : pos + 5 + size]))
            except (DecodeError, RemoteProtocolError) as exc:
                self._fail(sid, stream, _INVALID_ARGUMENT, str(exc) or "invalid ProcessingRequest")
                return
            except Exception:
                _log.exception("ext_proc stream failed")
                self._fail(sid, stream, _INTERNAL, "internal error in the endpoint picker")
                return
            pos += 5 + size
            self._send(sid, responses)
            if ext.finished:
                del self._streams[sid]
                self._finish(sid, stream, _RESET, 0)
                return
            if ext.suspended:
                stream.task = asyncio.get_running_loop().create_task(self._settle(sid, stream))
                break
        del buf[:pos]

    async def _settle(self, sid: int, stream: _Stream) -> None:
        try:
            responses = await stream.ext.settle()
        except Exception:
            _log.exception("ext_proc pre-scheduling step failed")
            responses = None
        stream.task = None
        if self._streams.get(sid) is not stream or self._transport is None:
            return
        if responses is None:
            self._fail(sid, stream, _INTERNAL, "internal error in the endpoint picker")
        else:
            self._send(sid, responses)
            if stream.ext.finished:
                del self._streams[sid]
                self._finish(sid, stream, _RESET, 0)
            else:
                self._drain(sid, stream)
        self._flush()

    def _send(self, sid: int, responses: list[ProcessingResponse]) -> None:
        if not responses:
            return
        parts = []
        for response in responses:
            body = response.SerializeToString()
            parts.append(len(body).to_bytes(5, "big"))
            parts.append(body)
        self._conn.send_data(sid, b"".join(parts))

    def _fail(self, sid: int, stream: _Stream, code: int, message: str) -> None:
        self._streams.pop(sid, None)
        stream.ext.end(_RESET, code)
        self._conn.send_trailers(
            sid, [(b"grpc-status", str(code).encode()), (b"grpc-message", message.encode()[:1024])]
        )
        self._finishing.append(sid)

    def _finish(self, sid: int, stream: _Stream, outcome: Outcome, status: int) -> None:
        stream.ext.end(outcome, status)
        self._conn.send_trailers(sid, _OK)
        self._finishing.append(sid)

    def _flush(self) -> None:
        """Write what ngh2 has ready; then RST_STREAM NO_ERROR the finished streams whose trailers went
        out (nghttp2 would send a reset ahead of the stream's queued DATA and trailers)."""
        transport = self._transport
        if transport is None:
            return
        conn = self._conn
        out = conn.data_to_send()
        finishing = self._finishing
        if finishing:
            waiting = []
            for sid in finishing:
                try:
                    if conn.queued_body_size(sid):
                        waiting.append(sid)
                    else:
                        conn.reset_stream(sid, 0)
                except ngh2.NGH2Error:
                    pass  # the stream is already closed (the client half-closed first)
            self._finishing = waiting
            more = conn.data_to_send()
            if more:
                out += more
        if out:
            transport.write(out)
