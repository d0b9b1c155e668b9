"""The HTTP/2 engines' defensive limits at frame level (fake transport): streams, windows, the memory
budget, header blocks, floods, timeouts, backpressure, and what request headers decide. Every test runs on
the h2 engine's :class:`H2Connection` and on the ngh2 engine's :class:`NgH2Connection` (the ``protocol``
fixture); where nghttp2 answers a violation with another (equally valid) error code, the test says so."""

from __future__ import annotations

import asyncio
import struct

import h2.config
import h2.connection
import h2.events
import hpack
import orjson
import pytest
from prometheus_client import CollectorRegistry
from srv_helpers import FakeScheduler, StaticSource, request_body, request_headers
from test_server_h2_frames import BODY, GRPC_HEADERS, FakeTransport, block, grpc_message, parse, responses

from epp.admission import Admitter
from epp.protocol import SessionConfig
from epp.server.h2 import frames as f
from epp.server.h2.connection import H2Connection
from epp.server.h2.headers import parse_grpc_timeout
from epp.server.h2.limits import H2Limits
from epp.server.metrics import RequestMetrics
from epp.server.ngh2 import NgH2Connection
from epp.server.routing import Router
from epp.server.stream import StreamCore
from scheduler.types import Outcome

MIB = 1 << 20


class PausableTransport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.limits: dict[str, int] = {}

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, high: int) -> None:
        self.limits["high"] = high


Protocol = type[H2Connection] | type[NgH2Connection]


@pytest.fixture(params=[H2Connection, NgH2Connection], ids=["h2", "ngh2"])
def protocol(request: pytest.FixtureRequest) -> Protocol:
    """The connection class of each engine that serves the ``--grpc-h2-*`` limits itself."""
    return request.param  # type: ignore[no-any-return]


def connect(
    protocol: Protocol, sched: FakeScheduler, limits: H2Limits | None = None, max_message: int = 17 * MIB
) -> tuple[H2Connection | NgH2Connection, PausableTransport]:
    metrics = RequestMetrics(CollectorRegistry())
    core = StreamCore(
        SessionConfig(), Router(StaticSource(), Admitter(None, lambda: 1.0), sched, metrics), metrics
    )
    conn, transport = protocol(core, max_message, limits=limits), PausableTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(f.PREFACE + f.settings({}) + f.frame(f.SETTINGS, f.ACK, 0))
    return conn, transport


def goaway_code(t: FakeTransport) -> int:
    kind, _, _, payload = parse(bytes(t.data))[-1]
    assert kind == f.GOAWAY and t.closed
    return int(struct.unpack(">II", payload[:8])[1])


def header_blocks(t: FakeTransport) -> list[tuple[int, int, dict[bytes, bytes]]]:
    """Every HEADERS frame the server sent, decoded (one HPACK decoder, as a client keeps): (stream,
    flags, fields). nghttp2 HPACK-encodes with Huffman codes and its dynamic table, so its bytes differ."""
    decoder = hpack.Decoder()
    frames = parse(bytes(t.data))
    return [(s, fl, dict(decoder.decode(p, raw=True))) for k, fl, s, p in frames if k == f.HEADERS]  # type: ignore[misc]


def settings_of(t: FakeTransport) -> dict[int, int]:
    payload = parse(bytes(t.data))[0][3]
    return {k: v for k, v in (struct.unpack_from(">HI", payload, i) for i in range(0, len(payload), 6))}


def test_settings_advertise_the_limits_and_the_connection_window_is_the_budget(
    sched: FakeScheduler, protocol: Protocol
) -> None:
    _, t = connect(
        protocol, sched, H2Limits(max_concurrent_streams=7, stream_window=1 << 17, connection_budget=4 * MIB)
    )
    assert settings_of(t) == {0x2: 0, 0x3: 7, 0x4: 1 << 17, 0x5: 1 << 20, 0x6: 16 << 10}
    update = parse(bytes(t.data))[1]
    assert update[0] == f.WINDOW_UPDATE and int.from_bytes(update[3], "big") == 4 * MIB - 65535


def test_streams_beyond_the_limit_are_refused(sched: FakeScheduler, protocol: Protocol) -> None:
    conn, t = connect(protocol, sched, H2Limits(max_concurrent_streams=2))
    for sid in (1, 3, 5):
        conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, sid, block(conn)))
    if protocol is NgH2Connection:  # nghttp2: a connection error once the peer acknowledged the limit
        assert goaway_code(t) == f.ErrorCode.PROTOCOL_ERROR
        return
    assert conn.open_streams == 2
    assert parse(bytes(t.data))[-1] == (f.RST_STREAM, 0, 5, struct.pack(">I", f.ErrorCode.REFUSED_STREAM))


def test_a_message_in_many_frames_is_assembled_and_its_window_replenished(
    sched: FakeScheduler, protocol: Protocol
) -> None:
    conn, t = connect(protocol, sched, H2Limits(stream_window=65535))
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 1, block(conn)))
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_headers())))
    big = orjson.dumps({"model": "m1", "prompt": "hello " * 40000})
    body = grpc_message(request_body(big))  # ~240 KB: more than the 64 KB stream window
    t.data.clear()
    conn.data_received(f.frame(f.DATA, 0, 1, body[:100]))  # the prefix: the rest of the message is granted
    grants = [
        int.from_bytes(p, "big") for k, _, s, p in parse(bytes(t.data)) if k == f.WINDOW_UPDATE and s == 1
    ]
    assert sum(grants) >= len(body) - 65535
    for i in range(100, len(body), 1000):
        conn.data_received(f.frame(f.DATA, 0, 1, body[i : i + 1000]))
    conn.data_received(f.window_update(0, 1 << 24) + f.window_update(1, 1 << 24))  # room for the echo
    answers = responses(parse(bytes(t.data)), 1)
    echoed = b"".join(r.request_body.response.body_mutation.streamed_response.body for r in answers)
    assert echoed == big
    assert conn.held_bytes == 0


def test_data_beyond_the_windows_is_a_flow_control_error(sched: FakeScheduler, protocol: Protocol) -> None:
    conn, t = connect(protocol, sched, H2Limits(stream_window=65535, connection_budget=65535))
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 1, block(conn)))
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 3, block(conn)))
    prefix = b"\x00" + (50000).to_bytes(4, "big")  # two partial messages: 40 KB, then 30 KB
    conn.data_received(f.frame(f.DATA, 0, 1, prefix + b"x" * 39995))
    assert not t.closed
    conn.data_received(f.frame(f.DATA, 0, 3, prefix + b"x" * 29995))  # beyond the connection window
    assert goaway_code(t) == f.ErrorCode.FLOW_CONTROL_ERROR


def test_large_messages_beyond_the_budget_end_their_stream(sched: FakeScheduler, protocol: Protocol) -> None:
    conn, t = connect(protocol, sched, H2Limits(connection_budget=8 * MIB))
    prefix = b"\x00" + (5 * MIB).to_bytes(4, "big")
    for sid in (1, 3):
        conn.data_received(
            f.frame(f.HEADERS, f.END_HEADERS, sid, block(conn)) + f.frame(f.DATA, 0, sid, prefix)
        )
    trailer = [h for s, fl, h in header_blocks(t) if s == 3 and fl & f.END_STREAM]
    assert trailer and trailer[0][b"grpc-status"] == b"8" and b"memory budget" in trailer[0][b"grpc-message"]
    assert conn.open_streams == 1 and not t.closed


def test_header_blocks_are_capped_and_hpack_bombs_end_the_connection(
    sched: FakeScheduler, protocol: Protocol
) -> None:
    conn, t = connect(protocol, sched)
    conn.data_received(f.frame(f.HEADERS, 0, 1, block(conn)))
    for _ in range(3):
        conn.data_received(f.frame(f.CONTINUATION, 0, 1, b"\x00" * 8000))
    if protocol is NgH2Connection:  # nghttp2 resets the stream; more than 8 CONTINUATIONs end the connection
        assert parse(bytes(t.data))[-1] == (f.RST_STREAM, 0, 1, struct.pack(">I", f.ErrorCode.PROTOCOL_ERROR))
        for _ in range(6):
            conn.data_received(f.frame(f.CONTINUATION, 0, 1, b"\x00" * 8000))
    assert goaway_code(t) == f.ErrorCode.ENHANCE_YOUR_CALM
    conn, t = connect(protocol, sched)
    bomb = b"\x40\x01x\x7f" + bytes([0xA1, 0x1E]) + b"a" * 4000 + b"\xbe" * 5000  # 4 KB value, 5000 times
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 1, bomb))
    bomb_code = f.ErrorCode.ENHANCE_YOUR_CALM if protocol is NgH2Connection else f.ErrorCode.COMPRESSION_ERROR
    assert goaway_code(t) == bomb_code


@pytest.mark.parametrize(
    "frame",
    [
        f.frame(f.PING, 0, 0, b"12345678"),
        f.settings({}),
        f.window_update(0, 1),
        f.frame(f.PRIORITY, 0, 1, b"\x00\x00\x00\x00\x10"),
    ],
)
def test_control_frame_floods_get_enhance_your_calm(
    sched: FakeScheduler, protocol: Protocol, frame: bytes
) -> None:
    conn, t = connect(protocol, sched, H2Limits(flood_rate=100))
    conn.data_received(frame * 99)
    assert not t.closed
    # PRIORITY never reaches Python on ngh2: nghttp2's glitch bucket (a burst of 10 x flood_rate) ends it
    priority_on_ngh2 = protocol is NgH2Connection and frame[3] == f.PRIORITY
    conn.data_received(frame * (1000 if priority_on_ngh2 else 2))
    assert goaway_code(t) == f.ErrorCode.ENHANCE_YOUR_CALM


def test_rapid_reset_gets_enhance_your_calm(sched: FakeScheduler, protocol: Protocol) -> None:
    conn, t = connect(protocol, sched, H2Limits(flood_rate=100))
    for sid in range(1, 400, 2):
        if t.closed:
            break
        conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, sid, block(conn)) + f.rst_stream(sid, 8))
    assert goaway_code(t) == f.ErrorCode.ENHANCE_YOUR_CALM


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (f.frame(f.PING, 0, 0, b"1"), f.ErrorCode.FRAME_SIZE_ERROR),
        (f.window_update(0, 0), f.ErrorCode.PROTOCOL_ERROR),
        (f.window_update(0, 2**31 - 1), f.ErrorCode.FLOW_CONTROL_ERROR),
        (f.frame(f.DATA, 0, 9, b"x"), f.ErrorCode.PROTOCOL_ERROR),  # DATA on an idle stream
        (f.rst_stream(9, 8), f.ErrorCode.PROTOCOL_ERROR),
        (b"\x20\x00\x00\x00\x00\x00\x00\x00\x01", f.ErrorCode.FRAME_SIZE_ERROR),  # a 2 MiB frame
    ],
)
def test_protocol_violations_are_connection_errors(
    sched: FakeScheduler, protocol: Protocol, data: bytes, code: int
) -> None:
    conn, t = connect(protocol, sched)
    conn.data_received(data)
    assert goaway_code(t) == code


def test_the_first_frame_must_be_settings(sched: FakeScheduler, protocol: Protocol) -> None:
    metrics = RequestMetrics(CollectorRegistry())
    core = StreamCore(
        SessionConfig(), Router(StaticSource(), Admitter(None, lambda: 1.0), sched, metrics), metrics
    )
    conn, t = protocol(core, MIB), FakeTransport()
    conn.connection_made(t)  # type: ignore[arg-type]
    conn.data_received(f.PREFACE + f.frame(f.PING, 0, 0, b"12345678"))
    assert goaway_code(t) == f.ErrorCode.PROTOCOL_ERROR


def test_stream_window_errors_reset_only_that_stream(sched: FakeScheduler, protocol: Protocol) -> None:
    conn, t = connect(protocol, sched)
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 1, block(conn)) + f.window_update(1, 0))
    if protocol is NgH2Connection:  # nghttp2 makes both connection errors (RFC 9113 allows stream errors)
        assert goaway_code(t) == f.ErrorCode.PROTOCOL_ERROR
        conn, t = connect(protocol, sched)
        conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 3, block(conn)) + f.window_update(3, 2**31 - 1))
        assert goaway_code(t) == f.ErrorCode.FLOW_CONTROL_ERROR
        return
    assert parse(bytes(t.data))[-1] == (f.RST_STREAM, 0, 1, struct.pack(">I", f.ErrorCode.PROTOCOL_ERROR))
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 3, block(conn)) + f.window_update(3, 2**31 - 1))
    assert parse(bytes(t.data))[-1] == (f.RST_STREAM, 0, 3, struct.pack(">I", f.ErrorCode.FLOW_CONTROL_ERROR))
    assert not t.closed


def test_other_methods_get_unimplemented_and_other_content_types_415(
    sched: FakeScheduler, protocol: Protocol
) -> None:
    conn, t = connect(protocol, sched)
    other = [(":method", "POST"), (":scheme", "http"), (":path", "/grpc.health.v1.Health/Check"),
             (":authority", "epp"), ("content-type", "application/grpc")]  # fmt: skip
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 1, block(conn, other)))
    plain = [(":method", "POST"), (":scheme", "http"),
             (":path", "/envoy.service.ext_proc.v3.ExternalProcessor/Process"), (":authority", "epp"),
             ("content-type", "application/json")]  # fmt: skip
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 3, block(conn, plain)))
    (sid1, flags1, unimplemented), (sid3, flags3, unsupported) = header_blocks(t)
    assert sid1 == 1 and flags1 & f.END_STREAM and unimplemented[b"grpc-status"] == b"12"
    assert sid3 == 3 and flags3 & f.END_STREAM and unsupported == {b":status": b"415"}
    assert conn.open_streams == 0 and sched.calls == []


def test_write_backpressure_pauses_reading(sched: FakeScheduler, protocol: Protocol) -> None:
    conn, t = connect(protocol, sched)
    conn.pause_writing()
    assert not t.reading
    conn.resume_writing()
    assert t.reading


async def test_grpc_timeout_ends_the_stream_with_deadline_exceeded(
    sched: FakeScheduler, protocol: Protocol
) -> None:
    conn, t = connect(protocol, sched)
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/envoy.service.ext_proc.v3.ExternalProcessor/Process"),
        (":authority", "epp"),
        ("content-type", "application/grpc"),
        ("grpc-timeout", "50m"),
    ]
    conn.data_received(f.frame(f.HEADERS, f.END_HEADERS, 1, block(conn, headers)))
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_headers({"x-request-id": "t"}))))
    conn.data_received(f.frame(f.DATA, 0, 1, grpc_message(request_body(BODY))))
    await asyncio.sleep(0.2)
    trailer = [h for _, fl, h in header_blocks(t) if fl & f.END_STREAM]
    assert trailer and trailer[-1][b"grpc-status"] == b"4"
    assert sched.completions() == [("completed", "t", Outcome.TIMEOUT)] and t.limits["high"] == 256 << 10


async def test_settings_timeout_closes_a_silent_connection(sched: FakeScheduler, protocol: Protocol) -> None:
    metrics = RequestMetrics(CollectorRegistry())
    core = StreamCore(
        SessionConfig(), Router(StaticSource(), Admitter(None, lambda: 1.0), sched, metrics), metrics
    )
    conn, t = protocol(core, MIB, limits=H2Limits(settings_timeout=0.05)), PausableTransport()
    conn.connection_made(t)  # type: ignore[arg-type]
    conn.data_received(f.PREFACE[:10])  # slowloris
    await asyncio.sleep(0.15)
    assert goaway_code(t) == f.ErrorCode.SETTINGS_TIMEOUT


def test_grpc_timeout_grammar() -> None:
    assert parse_grpc_timeout(b"10S") == 10.0 and parse_grpc_timeout(b"250m") == 0.25
    assert parse_grpc_timeout(b"1H") == 3600.0 and parse_grpc_timeout(b"5n") == pytest.approx(5e-9)
    for bad in (b"S", b"123456789S", b"10s", b"-1S", b"1.5S"):
        assert parse_grpc_timeout(bad) is None


def test_messages_filling_most_of_the_budget_complete_for_a_client_that_obeys_the_windows(
    sched: FakeScheduler, protocol: Protocol
) -> None:
    """A well-behaved client (the ``h2`` package, which sends only within our windows, here round-robin in
    16 KiB frames as Envoy) first has 450 KB consumed on one stream, then sends three 250 KB messages on
    three others at once: 1 MiB budget. nghttp2 announces consumed bytes only once they reach half its
    window, so without the ngh2 engine's top-up the three would stall with 200 KB of each sent; on both
    engines every body comes back whole."""
    metrics = RequestMetrics(CollectorRegistry())
    core = StreamCore(
        SessionConfig(), Router(StaticSource(), Admitter(None, lambda: 1.0), sched, metrics), metrics
    )
    conn, t = (
        protocol(core, 2 * MIB, limits=H2Limits(stream_window=65535, connection_budget=MIB)),
        FakeTransport(),
    )
    conn.connection_made(t)  # type: ignore[arg-type]
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    client.initiate_connection()
    bodies = {1: b"a" * 450_000, 3: b"b" * 250_000, 5: b"c" * 250_000, 7: b"d" * 250_000}
    todo: dict[int, bytes] = {}
    echoed: dict[int, bytearray] = {sid: bytearray() for sid in bodies}

    def start(sid: int) -> None:
        client.send_headers(sid, [(k, v) for k, v in GRPC_HEADERS])
        big = orjson.dumps({"model": "m1", "prompt": bodies[sid].decode()})
        todo[sid] = grpc_message(request_headers()) + grpc_message(request_body(big))

    def pump() -> None:
        for _ in range(2000):
            for sid, data in list(todo.items()):
                n = min(len(data), client.local_flow_control_window(sid), 16384)  # round-robin, as Envoy
                if n > 0:
                    client.send_data(sid, data[:n])
                    todo[sid] = data[n:]
            out = client.data_to_send()
            if out:
                conn.data_received(out)
            elif not t.data:
                return
            data, t.data = bytes(t.data), bytearray()
            for event in client.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    echoed[event.stream_id] += event.data

    start(1)
    pump()
    for sid in (3, 5, 7):
        start(sid)
    pump()
    assert all(not rest for rest in todo.values()), {sid: len(rest) for sid, rest in todo.items()}
    for sid, body in bodies.items():
        answers = responses([(f.DATA, 0, sid, bytes(echoed[sid]))], sid)
        text = b"".join(r.request_body.response.body_mutation.streamed_response.body for r in answers)
        assert orjson.loads(text)["prompt"].encode() == body, sid
