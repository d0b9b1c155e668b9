"""A prototype ext_proc connection on ``ngh2`` (sans-I/O HTTP/2 over libnghttp2), for measurement only.

Issue 12 asks whether nghttp2's hardened protocol core could replace our own at a CPU cost within 10 % per
request. This drives the same :class:`~epp.server.stream.ExtProcStream` as ``H2Connection`` with ngh2 doing
all framing, HPACK and flow control (its automatic WINDOW_UPDATEs, its floods and limits); ``inproc_bench.py
--engine ngh2`` measures it in the same run as ours; it can also stand in for ``H2Connection`` in
``H2Server`` (same constructor shape) to measure it behind Envoy. Not a server: no pre-scheduling await, no
timeouts, no request-header checks, a minimal shutdown. ``ngh2`` is not a dependency; install it by hand
to run this.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest

from epp.server.stream import ExtProcStream, StreamCore
from scheduler.types import Outcome

__all__ = ["NgH2Connection"]

ngh2: Any = importlib.import_module("ngh2")  # not a dependency: installed by hand to run this

_RESPONSE = [(b":status", b"200"), (b"content-type", b"application/grpc")]
_OK = [(b"grpc-status", b"0")]
_CANCEL, _RESET = Outcome.CLIENT_CANCEL, Outcome.STREAM_RESET


class NgH2Connection(asyncio.Protocol):
    def __init__(self, core: StreamCore, *_: object, on_close: Any = None, **__: object) -> None:
        self._core = core
        self._on_close = on_close
        self.shutting_down = False
        self._conn = ngh2.Connection(ngh2.Role.SERVER)
        self._streams: dict[int, tuple[ExtProcStream, bytearray]] = {}
        self._transport: Any = None

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def connection_lost(self, exc: Exception | None) -> None:
        for ext, _ in self._streams.values():
            ext.end(_RESET)
        self._streams.clear()
        if self._on_close is not None:
            self._on_close(self)

    def goaway(self) -> None:
        self._conn.send_shutdown_notice()
        self._transport.write(self._conn.data_to_send())

    def abort_all(self) -> None:
        self.connection_lost(None)
        self._transport.close()

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._conn.initiate_connection({ngh2.Setting.INITIAL_WINDOW_SIZE: 1 << 20})
        transport.write(self._conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        conn.receive_data(data)
        for event in conn.events():
            kind = type(event)
            if kind is ngh2.DataReceived:
                entry = self._streams.get(event.stream_id)
                if entry is not None:
                    self._data(event.stream_id, entry, event.data)
                if event.end_stream and event.stream_id in self._streams:
                    ext, _ = self._streams.pop(event.stream_id)
                    ext.end(_CANCEL)
                    conn.send_trailers(event.stream_id, _OK)
            elif kind is ngh2.RequestReceived:
                self._streams[event.stream_id] = (self._core.open(), bytearray())
                conn.send_response(event.stream_id, _RESPONSE)
            elif kind is ngh2.StreamReset:
                entry = self._streams.pop(event.stream_id, None)
                if entry is not None:
                    entry[0].end(_RESET)
        out = conn.data_to_send()
        if out:
            self._transport.write(out)

    def _data(self, sid: int, entry: tuple[ExtProcStream, bytearray], data: bytes) -> None:
        ext, buf = entry
        buf += data
        pos = 0
        while len(buf) - pos >= 5:
            size = int.from_bytes(buf[pos + 1 : pos + 5], "big")
            if len(buf) - pos - 5 < size:
                break
            responses = ext.feed(ProcessingRequest.FromString(buf[pos + 5 : pos + 5 + size]))
            pos += 5 + size
            for response in responses:
                body = response.SerializeToString()
                self._conn.send_data(sid, len(body).to_bytes(5, "big") + body)
            if ext.finished:
                ext.end(_RESET, 0)
                self._conn.send_trailers(sid, _OK)
                self._conn.reset_stream(sid, 0)
                del self._streams[sid]
                return
        del buf[:pos]
