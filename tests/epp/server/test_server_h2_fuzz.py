"""Property tests of the h2 engine's frame handling with the ``h2`` package's client as the oracle.

A client built on ``h2`` (the reference implementation of RFC 9113 in Python) runs random sessions against
:class:`H2Connection`: several streams, each a full ext_proc exchange sent in random DATA pieces, mixed with
PINGs, SETTINGS changes, WINDOW_UPDATEs and resets, with every byte stream cut at random points. The client
obeys our windows and frame size as ``h2`` enforces them, and parses everything we send: any invalid frame,
flow-control breach or HPACK error of ours raises in ``h2``. Each stream that was not reset must end with
``grpc-status: 0`` after the picker's routing answer; the picker must never end the connection. A second
property throws random bytes after a valid preface: the connection ends with a protocol error code or goes
on; it never reaches the catch-all (GOAWAY INTERNAL_ERROR).
"""

from __future__ import annotations

import itertools

import h2.config
import h2.connection
import h2.events
import h2.settings
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from srv_helpers import (
    FakeScheduler,
    StaticSource,
    request_body,
    request_headers,
    response_body,
    response_headers,
)
from test_server_h2_frames import FakeTransport

from epp.admission import Admitter
from epp.protocol import SessionConfig
from epp.server.h2 import frames as f
from epp.server.h2.connection import H2Connection
from epp.server.h2.limits import H2Limits
from epp.server.metrics import RequestMetrics
from epp.server.routing import Router
from epp.server.stream import StreamCore

HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/envoy.service.ext_proc.v3.ExternalProcessor/Process"),
    (":authority", "epp"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]


def _exchange(i: int, body_size: int) -> bytes:
    body = b'{"model": "m1", "prompt": "' + b"x" * body_size + b'"}'
    out = b""
    for msg in (
        request_headers({"x-request-id": f"r{i}"}),
        request_body(body),
        response_headers(200),
        response_body(b"{}"),
    ):
        data = msg.SerializeToString()
        out += b"\0" + len(data).to_bytes(4, "big") + data
    return out


class Session:
    """The h2 client and our server, wired through byte streams cut at the points hypothesis picks."""

    def __init__(self, draw: st.DataObject) -> None:
        self.draw = draw
        metrics = RequestMetrics(CollectorRegistry())
        self.sched = FakeScheduler()
        core = StreamCore(
            SessionConfig(), Router(StaticSource(), Admitter(None, lambda: 1.0), self.sched, metrics), metrics
        )
        window = draw.draw(st.sampled_from([65535, 1 << 17, 1 << 20]), label="stream window")
        self.server = H2Connection(core, 1 << 20, limits=H2Limits(stream_window=window))
        self.transport = FakeTransport()
        self.server.connection_made(self.transport)  # type: ignore[arg-type]
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.client.initiate_connection()
        self.unsent: dict[int, bytes] = {}  # what each stream still has to send
        self.data: dict[int, bytes] = {}
        self.ended: dict[int, int | None] = {}  # stream -> grpc-status (None: reset)
        self.reset: set[int] = set()

    def to_server(self) -> None:
        out = self.client.data_to_send()
        if not out:
            return
        cuts = self.draw.draw(st.lists(st.integers(1, len(out)), max_size=3), label="cuts")
        points = [0, *sorted(set(cuts)), len(out)]
        for a, b in itertools.pairwise(points):
            if b > a:
                self.server.data_received(out[a:b])
        assert not self.transport.closed, (
            f"the server ended the connection: {bytes(self.transport.data)[-40:]!r}"
        )

    def to_client(self) -> None:
        out, self.transport.data = bytes(self.transport.data), bytearray()
        for event in self.client.receive_data(out):  # raises on any invalid frame of ours
            if isinstance(event, h2.events.DataReceived):
                self.data[event.stream_id] = self.data.get(event.stream_id, b"") + event.data
                self.client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived):
                status = dict(event.headers).get(b"grpc-status")
                self.ended[event.stream_id] = int(status) if status is not None else -1
            elif isinstance(event, h2.events.StreamReset):
                self.ended.setdefault(event.stream_id, None)
            elif isinstance(event, h2.events.ConnectionTerminated):
                raise AssertionError(f"GOAWAY {event.error_code}: {event.additional_data!r}")

    def send_some(self, sid: int) -> None:
        """As much of ``sid``'s exchange as the windows allow, in pieces of random size."""
        while self.unsent.get(sid) and sid not in self.ended and sid not in self.reset:
            room = min(self.client.local_flow_control_window(sid), self.client.max_outbound_frame_size)
            if room <= 0:
                return
            size = self.draw.draw(st.integers(1, room), label="piece")
            piece, self.unsent[sid] = self.unsent[sid][:size], self.unsent[sid][size:]
            self.client.send_data(sid, piece, end_stream=False)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(st.data())
def test_random_sessions_of_a_reference_client_complete(data: st.DataObject) -> None:
    s = Session(data)
    s.to_server()
    s.to_client()
    streams = [2 * i + 1 for i in range(data.draw(st.integers(1, 4), label="streams"))]
    for i, sid in enumerate(streams):
        s.client.send_headers(sid, HEADERS)
        s.unsent[sid] = _exchange(i, data.draw(st.sampled_from([10, 3000, 70_000, 200_000]), label="body"))
    for _ in range(200):
        if all(sid in s.ended or sid in s.reset for sid in streams):
            break
        action = data.draw(st.sampled_from(["send", "send", "send", "ping", "settings", "update", "reset"]))
        open_ = [sid for sid in streams if sid not in s.ended and sid not in s.reset]
        if action == "send":
            s.send_some(data.draw(st.sampled_from(open_)))
        elif action == "ping":
            s.client.ping(b"12345678")
        elif action == "settings":  # (not MAX_FRAME_SIZE: h2 applies a larger one only after the read
            # that carries our ACK, and would refuse our next frame in that same read)
            window = data.draw(st.integers(1 << 14, 1 << 20))
            s.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        elif action == "update":
            s.client.increment_flow_control_window(data.draw(st.integers(1, 1 << 20)))
        elif data.draw(st.integers(0, 9)) == 0:  # a rare reset
            sid = data.draw(st.sampled_from(open_))
            s.client.reset_stream(sid)
            s.reset.add(sid)
        s.to_server()
        s.to_client()
    else:
        raise AssertionError(f"stalled: unsent {[len(s.unsent[sid]) for sid in streams]}, ended {s.ended}")
    for sid in streams:
        if sid in s.reset:
            continue
        assert s.ended.get(sid) == 0, (sid, s.ended)
        raw, answers, pos = s.data.get(sid, b""), [], 0
        while pos < len(raw):
            n = int.from_bytes(raw[pos + 1 : pos + 5], "big")
            answers.append(ProcessingResponse.FromString(raw[pos + 5 : pos + 5 + n]))
            pos += 5 + n
        assert answers[0].WhichOneof("response") == "request_headers"
        assert b"x-gateway-destination-endpoint" in answers[0].SerializeToString()
    assert s.server.held_bytes == 0 or s.server.open_streams


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=400), st.integers(1, 50))
def test_garbage_after_the_preface_never_raises(garbage: bytes, cut: int) -> None:
    metrics = RequestMetrics(CollectorRegistry())
    core = StreamCore(
        SessionConfig(),
        Router(StaticSource(), Admitter(None, lambda: 1.0), FakeScheduler(), metrics),
        metrics,
    )
    server, transport = H2Connection(core, 1 << 20), FakeTransport()
    server.connection_made(transport)  # type: ignore[arg-type]
    stream = f.PREFACE + f.settings({}) + garbage
    for i in range(0, len(stream), cut):
        server.data_received(stream[i : i + cut])
        if transport.closed:
            break
    data = bytes(transport.data)
    goaway = data.rfind(b"\x07\x00\x00\x00\x00\x00")  # GOAWAY header: type 7, flags 0, stream 0
    if transport.closed:  # ended with a protocol error code, never INTERNAL_ERROR (a bug caught)
        code = int.from_bytes(data[goaway + 10 : goaway + 14], "big")
        assert goaway >= 0 and code != f.ErrorCode.INTERNAL_ERROR, data[goaway:]
