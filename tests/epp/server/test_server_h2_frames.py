"""The HTTP/2 engine at frame level, with a fake transport: flow control, framing, errors."""

from __future__ import annotations

import struct
import weakref

import hpack
import orjson
import pytest
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingResponse
from prometheus_client import CollectorRegistry
from srv_helpers import (
    FakeScheduler,
    StaticSource,
    request_body,
    request_headers,
    response_body,
    response_headers,
)

from epp.admission import Admitter
from epp.protocol import SessionConfig
from epp.server.h2 import frames as f
from epp.server.h2.connection import H2Connection
from epp.server.metrics import RequestMetrics
from epp.server.routing import Router
from epp.server.stream import StreamCore
from scheduler.types import Outcome

BODY = orjson.dumps({"model": "m1", "prompt": "hello " * 4000})  # ~24 KB: more than one 16 KB frame


class FakeTransport:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def parse(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 3], "big")
        kind, flags = data[pos + 3], data[pos + 4]
        sid = int.from_bytes(data[pos + 5 : pos + 9], "big")
        out.append((kind, flags, sid, bytes(data[pos + 9 : pos + 9 + n])))
        pos += 9 + n
    return out


def grpc_message(msg: object) -> bytes:
    data = msg.SerializeToString()  # type: ignore[attr-defined]
    return b"\x00" + len(data).to_bytes(4, "big") + data


def responses(frames: list[tuple[int, int, int, bytes]], sid: int) -> list[ProcessingResponse]:
    data = b"".join(p for k, _, s, p in frames if k == f.DATA and s == sid)
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos + 1 : pos + 5], "big")
        out.append(ProcessingResponse.FromString(data[pos + 5 : pos + 5 + n]))
        pos += 5 + n
    return out


def connect(
    sched: FakeScheduler, settings: dict[int, int] | None = None
) -> tuple[H2Connection, FakeTransport]:
    registry = CollectorRegistry()
    metrics = RequestMetrics(registry)
    core = StreamCore(
        SessionConfig(), Router(StaticSource(), Admitter(None, lambda: 1.0), sched, metrics), metrics
    )
    conn, transport = H2Connection(core, 1 << 20), FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(f.PREFACE + f.settings(settings or {}))
    transport.data.clear()
    return conn, transport


GRPC_HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/envoy.service.ext_proc.v3.ExternalProcessor/Process"),
    (":authority", "epp"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]
# Keyed by the connection object itself (weakly): an id() can be reused by a later connection once the
# earlier one is collected, which would hand it an encoder whose dynamic table the new decoder never saw.
_ENCODERS: weakref.WeakKeyDictionary[H2Connection, hpack.Encoder] = weakref.WeakKeyDictionary()


def block(conn: H2Connection, headers: list[tuple[str, str]] | None = None) -> bytes:
    """An HPACK block for ``conn`` (one encoder per connection, as a client keeps)."""
    encoder = _ENCODERS.setdefault(conn, hpack.Encoder())
    return encoder.encode(headers or GRPC_HEADERS)


def open_stream(conn: H2Connection, sid: int) -> None:
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, sid, block(conn)))


def test_request_routes_with_frames_split_to_the_peer_frame_size(sched: FakeScheduler) -> None:
    conn, t = connect(sched)
    open_stream(conn, 1)
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_headers())))
    body = grpc_message(request_body(BODY))
    conn.data_received(f.frame(f.DATA, 0, 1, body[:7000]) + f.frame(f.DATA, 0, 1, body[7000:]))
    frames = parse(t.data)
    assert frames[0][:3] == (f.HEADERS, f.END_HEADERS, 1) and frames[0][3] == f.RESPONSE_HEADERS
    assert all(len(p) <= 16384 for k, _, _, p in frames if k == f.DATA)
    routed, echoed = responses(frames, 1)
    assert routed.WhichOneof("response") == "request_headers"
    assert echoed.request_body.response.body_mutation.streamed_response.body == BODY
    # response path, then the stream ends with grpc-status 0 and RST_STREAM(NO_ERROR)
    t.data.clear()
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(response_headers(200))))
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(response_body(b"{}"))))
    frames = parse(t.data)
    assert frames[-2][:3] == (f.HEADERS, f.END_HEADERS | f.END_STREAM, 1) and b"grpc-status" in frames[-2][3]
    assert frames[-1] == (f.RST_STREAM, 0, 1, b"\x00\x00\x00\x00")
    assert [c[2] for c in sched.completions()] == [Outcome.OK] and conn.open_streams == 0


def test_sends_wait_for_the_peer_window(sched: FakeScheduler) -> None:
    conn, t = connect(sched, {0x4: 1000})  # the peer's stream window: 1000 bytes
    open_stream(conn, 1)
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_headers())))
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_body(BODY))))
    sent = sum(len(p) for k, _, _, p in parse(t.data) if k == f.DATA)
    assert sent == 1000
    conn.data_received(f.window_update(1, 300) + f.window_update(0, 100_000))  # room for 300 more
    assert sum(len(p) for k, _, _, p in parse(t.data) if k == f.DATA) == 1300
    conn.data_received(f.window_update(1, 100_000))
    frames = parse(t.data)
    assert sum(len(p) for k, _, _, p in frames if k == f.DATA) > len(BODY)
    # the pieces join up into exactly the two answers, in order
    routed, echoed = responses(frames, 1)
    assert routed.WhichOneof("response") == "request_headers"
    assert echoed.request_body.response.body_mutation.streamed_response.body == BODY


def test_ping_settings_padding_continuation_and_reset(sched: FakeScheduler) -> None:
    conn, t = connect(sched)
    conn.data_received(f.frame(f.PING, 0, 0, b"12345678") + f.settings({0x3: 100}))
    frames = parse(t.data)
    assert (f.PING, f.ACK, 0, b"12345678") in frames and (f.SETTINGS, f.ACK, 0, b"") in frames
    t.data.clear()
    head = block(conn)
    conn.data_received(
        f.frame(f.HEADERS, 0, 3, head[:5]) + f.frame(f.CONTINUATION, f.END_HEADERS, 3, head[5:])
    )
    padded = b"\x04" + grpc_message(request_headers({"x-request-id": "p"})) + b"\x00" * 4
    conn.data_received(f.frame(f.DATA, f.PADDED, 3, padded))
    conn.data_received(f.frame(f.DATA, 0, 3, grpc_message(request_body(BODY))))
    assert sched.calls[0][:2] == ("dispatched", "p")
    conn.data_received(f.rst_stream(3, f.ErrorCode.CANCEL))
    assert sched.completions() == [("completed", "p", Outcome.STREAM_RESET)]


def test_half_close_while_dispatched_is_client_cancel(sched: FakeScheduler) -> None:
    conn, t = connect(sched)
    open_stream(conn, 1)
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_headers({"x-request-id": "h"}))))
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_body(BODY))))
    conn.data_received(f.frame(f.DATA, f.END_STREAM, 1, b""))
    assert sched.completions() == [("completed", "h", Outcome.CLIENT_CANCEL)]
    assert parse(t.data)[-1][:3] == (f.HEADERS, f.END_HEADERS | f.END_STREAM, 1)


@pytest.mark.parametrize(
    ("message", "status"),
    [
        (b"\x01" + (5).to_bytes(4, "big") + b"xxxxx", b"12"),  # compressed
        (b"\x00" + (2 << 20).to_bytes(4, "big"), b"8"),  # too large
        (b"\x00" + (3).to_bytes(4, "big") + b"\xff\xff\xff", b"3"),  # not a ProcessingRequest
        (grpc_message(request_body(b"{}")), b"3"),  # body before headers: protocol violation
    ],
)
def test_bad_messages_end_the_stream_with_a_grpc_status(
    sched: FakeScheduler, message: bytes, status: bytes
) -> None:
    conn, t = connect(sched)
    open_stream(conn, 1)
    conn.data_received(f.frame(f.DATA, 0, 1, message))
    trailer = parse(t.data)[-2]
    assert trailer[:3] == (f.HEADERS, f.END_HEADERS | f.END_STREAM, 1)
    assert b"grpc-status" + bytes([len(status)]) + status in trailer[3]
    assert conn.open_streams == 0


def test_connection_errors_send_goaway_and_close(sched: FakeScheduler) -> None:
    conn, t = connect(sched)
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 2, b""))  # even stream id from a client
    kind, _, _, payload = parse(t.data)[-1]
    assert kind == f.GOAWAY and struct.unpack(">II", payload[:8])[1] == f.ErrorCode.PROTOCOL_ERROR
    assert t.closed
    bad, t2 = H2Connection(conn._core, 1 << 20), FakeTransport()
    bad.connection_made(t2)  # type: ignore[arg-type]
    bad.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert parse(t2.data)[-1][0] == f.GOAWAY and t2.closed


def test_goaway_refuses_new_streams_and_abort_all_ends_open_ones(sched: FakeScheduler) -> None:
    conn, t = connect(sched)
    open_stream(conn, 1)
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_headers({"x-request-id": "s"}))))
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_body(BODY))))
    conn.goaway()
    t.data.clear()
    open_stream(conn, 3)
    assert parse(t.data) == [(f.RST_STREAM, 0, 3, struct.pack(">I", f.ErrorCode.REFUSED_STREAM))]
    conn.abort_all()
    assert sched.completions() == [("completed", "s", Outcome.SHUTDOWN)] and t.closed


def test_frames_on_streams_we_closed_are_ignored(sched: FakeScheduler) -> None:
    conn, t = connect(sched)
    open_stream(conn, 1)
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_body(b"{}"))))  # violation: stream ends
    t.data.clear()
    conn.data_received(
        f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 1, block(conn, [("grpc-status", "0")]))
    )
    conn.data_received(f.frame(f.DATA, 0, 1, b"late"))
    assert parse(t.data) == [] and not t.closed
    open_stream(conn, 5)
    assert conn.open_streams == 1


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (0, "", [("grpc-status", "0")]),
        (13, "", [("grpc-status", "13")]),
        (0, "done", [("grpc-status", "0"), ("grpc-message", "done")]),
        (8, "too big: 5%", [("grpc-status", "8"), ("grpc-message", "too big: 5%25")]),
    ],
)
def test_trailers_decode_to_the_status_and_message(status: int, message: str, expected: list) -> None:
    block = f.trailers(status, message)
    assert [(k.decode(), v.decode()) for k, v in hpack.Decoder().decode(block, raw=True)] == expected


def test_ok_trailers_are_built_once() -> None:
    # every answered stream ends OK without a message: the block is a constant, not rebuilt per stream
    assert f.trailers(f.GRPC_OK) is f.OK_TRAILERS
    assert f.trailers(f.GRPC_OK, "") is f.OK_TRAILERS
    assert f.trailers(f.GRPC_OK, "x") is not f.OK_TRAILERS
