"""The sans-I/O HTTP/2 core (``H2Core``) driven by bytes alone: no event loop, no transport, time passed in.

Unit tests of its stream states, events and time handling, and a property test with the ``h2`` package's
client as the reference: random sessions (streams with and without ``grpc-timeout``, DATA cut at random
points, PINGs, SETTINGS, WINDOW_UPDATEs, resets, deadlines firing, time advancing) must complete, and the
deadline events must pair up with the streams that carry one.
"""

from __future__ import annotations

import struct

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack
import pytest
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HeadersResponse,
    ProcessingRequest,
    ProcessingResponse,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from srv_helpers import FakeScheduler, StaticSource, request_body, request_headers
from test_server_h2_frames import BODY, grpc_message, parse, responses
from test_server_h2_fuzz import HEADERS, _exchange

from epp.admission import Admitter
from epp.protocol import SessionConfig
from epp.server.h2 import frames as f
from epp.server.h2.core import H2Core
from epp.server.h2.events import (
    TRANSITIONS,
    ConnectionClosed,
    DeadlineCleared,
    DeadlineSet,
    ExtProcHandler,
    StreamState,
    Suspended,
)
from epp.server.h2.limits import H2Limits
from epp.server.h2.sender import H2Stream
from epp.server.metrics import RequestMetrics
from epp.server.routing import Router
from epp.server.stream import StreamCore
from scheduler.types import Outcome

TIMEOUT_HEADERS = [*HEADERS, ("grpc-timeout", "100S")]


def stream_core(sched: FakeScheduler) -> StreamCore:
    metrics = RequestMetrics(CollectorRegistry())
    router = Router(StaticSource(), Admitter(None, lambda: 1.0), sched, metrics)
    return StreamCore(SessionConfig(), router, metrics)


class Client:
    """Frames as a client sends them, with one HPACK encoder for the connection."""

    def __init__(self) -> None:
        self.encoder = hpack.Encoder()

    def headers(
        self, sid: int, headers: list[tuple[str, str]] = HEADERS, flags: int = f.END_HEADERS
    ) -> bytes:
        return f.frame(f.HEADERS, flags, sid, self.encoder.encode(headers))


def started(open_stream: object, limits: H2Limits | None = None, now: float = 0.0) -> H2Core:
    """A core past the preface and both SETTINGS (ours acknowledged)."""
    core = H2Core(open_stream, 1 << 20, limits=limits)  # type: ignore[arg-type]
    core.initiate(now)
    core.receive_data(f.PREFACE + f.settings({}) + f.frame(f.SETTINGS, f.ACK, 0), now)
    return core


def trailer_status(out: bytes, sid: int) -> bytes:
    blocks = [p for k, fl, s, p in parse(out) if k == f.HEADERS and s == sid and fl & f.END_STREAM]
    assert blocks, parse(out)
    return blocks[-1]


class Handler:
    """A fake ext_proc stream: answers every message with one response, suspends after ``suspend_at``."""

    def __init__(self, suspend_at: int = 0) -> None:
        self.fed: list[ProcessingRequest] = []
        self.ended: list[tuple[Outcome, int]] = []
        self.suspended = False
        self.finished = False
        self._suspend_at = suspend_at

    def feed(self, msg: ProcessingRequest) -> list[ProcessingResponse]:
        self.fed.append(msg)
        self.suspended = len(self.fed) == self._suspend_at
        return [ProcessingResponse(request_headers=HeadersResponse())]

    async def settle(self) -> list[ProcessingResponse]:
        raise AssertionError("the core never awaits")

    def end(self, outcome: Outcome, status: int = -1) -> None:
        self.ended.append((outcome, status))


def test_a_request_walks_open_then_closed_and_the_core_needs_no_loop(sched: FakeScheduler) -> None:
    core, client = started(stream_core(sched).open), Client()
    assert core.state_of(1) is None and not core.settings_pending
    core.receive_data(client.headers(1), 1.0)
    assert core.state_of(1) is StreamState.OPEN
    out = core.receive_data(
        f.frame(f.DATA, 0, 1, grpc_message(request_headers()) + grpc_message(request_body(BODY))), 1.0
    )
    routed, echoed = responses(parse(out), 1)
    assert routed.WhichOneof("response") == "request_headers"
    assert echoed.request_body.response.body_mutation.streamed_response.body == BODY
    out = core.receive_data(f.frame(f.DATA, f.END_STREAM, 1, b""), 1.0)  # half-close while dispatched
    assert trailer_status(out, 1).startswith(b"\x00\x0bgrpc-status\x010")
    assert core.state_of(1) is StreamState.CLOSED and core.events == []
    assert [c[2] for c in sched.completions()] == [Outcome.CLIENT_CANCEL]


def test_answers_waiting_for_the_window_keep_the_stream_closing(sched: FakeScheduler) -> None:
    core, client = started(stream_core(sched).open), Client()
    core.receive_data(f.settings({0x4: 1000}) + client.headers(1), 0.0)  # the peer's stream window: 1000
    messages = grpc_message(request_headers()) + grpc_message(request_body(BODY))
    core.receive_data(f.frame(f.DATA, f.END_STREAM, 1, messages), 0.0)
    assert core.state_of(1) is StreamState.CLOSING and core.held_bytes > 0
    assert core.receive_data(f.frame(f.DATA, 0, 1, b"late"), 0.0) == b""  # ignored once closing
    out = core.receive_data(f.window_update(1, 1 << 20), 0.0)
    assert trailer_status(out, 1) and core.state_of(1) is StreamState.CLOSED and core.held_bytes == 0
    assert f.RST_STREAM not in [k for k, *_ in parse(out)]  # the client had finished: no RST_STREAM


def test_a_deadline_while_answers_wait_ends_deadline_exceeded(sched: FakeScheduler) -> None:
    core, client = started(stream_core(sched).open), Client()
    core.receive_data(f.settings({0x4: 1000}) + client.headers(1, [*HEADERS, ("grpc-timeout", "1S")]), 0.0)
    messages = grpc_message(request_headers()) + grpc_message(request_body(BODY))
    core.receive_data(f.frame(f.DATA, f.END_STREAM, 1, messages), 0.0)
    assert core.state_of(1) is StreamState.CLOSING  # grpc-status 0 decided, answers wait for the window
    out = core.expire(1)
    assert b"grpc-status\x014" in trailer_status(out, 1)  # not 0: the answers were cut off
    assert core.state_of(1) is StreamState.CLOSED and core.held_bytes == 0


def test_the_transition_table_is_enforced() -> None:
    stream = H2Stream(Handler(), 65535, 65535)  # type: ignore[arg-type]
    stream.move(StreamState.SUSPENDED)
    stream.move(StreamState.OPEN)
    stream.move(StreamState.CLOSING)
    with pytest.raises(AssertionError, match="CLOSING -> OPEN"):
        stream.move(StreamState.OPEN)
    stream.move(StreamState.CLOSED)
    assert TRANSITIONS[StreamState.CLOSED] == frozenset()


def test_a_grpc_timeout_is_an_event_and_expire_ends_the_stream_with_timeout(sched: FakeScheduler) -> None:
    core, client = started(stream_core(sched).open), Client()
    core.receive_data(client.headers(1, [*HEADERS, ("grpc-timeout", "250m")]), 0.0)
    core.receive_data(client.headers(3, [*HEADERS, ("grpc-timeout", "2S")]), 0.0)
    assert core.events == [DeadlineSet(1, 0.25), DeadlineSet(3, 2.0)]
    core.events.clear()
    messages = grpc_message(request_headers({"x-request-id": "t"})) + grpc_message(request_body(BODY))
    core.receive_data(f.frame(f.DATA, 0, 1, messages), 0.0)
    out = core.expire(1)
    assert b"grpc-status\x014" in trailer_status(out, 1) and core.events == []  # the timer has fired
    assert sched.completions() == [("completed", "t", Outcome.TIMEOUT)]
    assert core.expire(1) == b""  # a timer that fires late changes nothing
    core.events.clear()
    core.receive_data(f.rst_stream(3, f.ErrorCode.CANCEL), 0.0)  # ended first: its timer is cleared
    assert core.events == [DeadlineCleared(3)] and core.expire(3) == b""


def test_a_suspended_stream_buffers_its_messages_until_settled() -> None:
    handlers: list[Handler] = []

    def open_stream() -> ExtProcHandler:
        handlers.append(Handler(suspend_at=1))
        return handlers[-1]

    core, client = started(open_stream), Client()
    core.receive_data(client.headers(1), 0.0)
    out = core.receive_data(f.frame(f.DATA, 0, 1, grpc_message(request_headers()) * 2), 0.0)
    (handler,) = handlers
    assert core.events == [Suspended(1, handler)] and core.state_of(1) is StreamState.SUSPENDED
    assert len(handler.fed) == 1 and len(responses(parse(out), 1)) == 1
    core.events.clear()
    core.receive_data(f.frame(f.DATA, 0, 1, grpc_message(request_headers())), 0.0)
    assert len(handler.fed) == 1  # still waiting
    handler.suspended = False
    settle_answer = ProcessingResponse(request_headers=HeadersResponse())
    out = core.settled(1, [settle_answer])
    assert len(handler.fed) == 3 and len(responses(parse(out), 1)) == 3  # its answer, then two more
    assert core.state_of(1) is StreamState.OPEN and core.held_bytes == 0
    assert core.settled(1, []) == b""  # only a suspended stream settles


def test_a_failed_settle_ends_the_stream_internal_and_a_reset_one_is_ignored() -> None:
    handlers: list[Handler] = []

    def open_stream() -> ExtProcHandler:
        handlers.append(Handler(suspend_at=1))
        return handlers[-1]

    core, client = started(open_stream), Client()
    for sid in (1, 3):
        core.receive_data(client.headers(sid) + f.frame(f.DATA, 0, sid, grpc_message(request_headers())), 0)
    out = core.settled(1, None)
    assert b"grpc-status\x0213" in trailer_status(out, 1) and core.state_of(1) is StreamState.CLOSED
    core.receive_data(f.rst_stream(3, f.ErrorCode.CANCEL), 0.0)
    assert core.settled(3, []) == b"" and handlers[1].ended == [(Outcome.STREAM_RESET, -1)]


def test_the_flood_bucket_refills_with_the_time_passed_in() -> None:
    core = started(Handler, H2Limits(flood_rate=100), now=10.0)
    ping = f.frame(f.PING, 0, 0, b"12345678")
    core.receive_data(ping * 99, 10.0)
    core.receive_data(ping * 40, 10.5)  # half a second: 50 tokens back
    assert not core.closed and core.events == []
    out = core.receive_data(ping * 20, 10.5)
    assert core.closed and core.events == [ConnectionClosed(f.ErrorCode.ENHANCE_YOUR_CALM, core_reason(out))]
    assert core.receive_data(ping, 20.0) == b""  # nothing is read after GOAWAY


def core_reason(out: bytes) -> str:
    kind, _, _, payload = parse(out)[-1]
    assert kind == f.GOAWAY
    return payload[8:].decode()


def test_idle_and_settings_timeouts_are_decided_from_the_time_passed_in() -> None:
    core = H2Core(Handler, 1 << 20)  # type: ignore[arg-type]
    core.initiate(100.0)
    assert core.settings_pending
    core.receive_data(f.PREFACE + f.settings({}), 101.0)
    assert core.settings_pending  # ours not acknowledged yet
    core.receive_data(f.frame(f.SETTINGS, f.ACK, 0), 102.0)
    assert not core.settings_pending
    assert core.idle_check(112.0, 30.0) == 20.0 and core.idle_check(131.0, 30.0) == 3.0
    assert core.idle_check(132.0, 30.0) == 0.0
    core.receive_data(Client().headers(1), 140.0)  # an open stream is never idle
    assert core.idle_check(1000.0, 30.0) == 3.0
    out = core.close(f.ErrorCode.NO_ERROR, "idle")
    assert parse(out)[0][0] == f.GOAWAY and core.events == [ConnectionClosed(f.ErrorCode.NO_ERROR, "idle")]


def test_shutdown_and_a_lost_connection_end_streams_with_their_outcomes() -> None:
    handlers: list[Handler] = []

    def open_stream() -> ExtProcHandler:
        handlers.append(Handler())
        return handlers[-1]

    core, client = started(open_stream), Client()
    core.receive_data(client.headers(1) + client.headers(3), 0.0)
    assert parse(core.goaway())[0][0] == f.GOAWAY and core.goaway() == b""
    assert parse(core.receive_data(client.headers(5), 0.0)) == [
        (f.RST_STREAM, 0, 5, struct.pack(">I", f.ErrorCode.REFUSED_STREAM))
    ]
    core.receive_data(f.rst_stream(1, f.ErrorCode.CANCEL), 0.0)
    core.connection_lost()
    assert [h.ended for h in handlers] == [[(Outcome.STREAM_RESET, -1)], [(Outcome.STREAM_RESET, -1)]]
    core2, client = started(open_stream), Client()
    core2.receive_data(client.headers(1), 0.0)
    assert parse(core2.abort_all()) == [(f.RST_STREAM, 0, 1, struct.pack(">I", f.ErrorCode.CANCEL))]
    assert handlers[-1].ended == [(Outcome.SHUTDOWN, -1)] and core2.open_streams == 0


# -- property: the h2 package's client against the core ------------------------------------------------


class CoreSession:
    """An ``h2`` client and an :class:`H2Core`, wired by byte strings cut where hypothesis says, with a
    clock that advances and the core's deadline events tracked as an adapter would."""

    def __init__(self, draw: st.DataObject) -> None:
        self.draw = draw
        self.sched = FakeScheduler()
        window = draw.draw(st.sampled_from([65535, 1 << 17, 1 << 20]), label="stream window")
        self.core = H2Core(stream_core(self.sched).open, 1 << 20, limits=H2Limits(stream_window=window))
        self.now = 0.0
        self.armed: set[int] = set()  # deadlines the core asked for and did not clear
        self.to_client_bytes = self.core.initiate(self.now)
        self.client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.client.initiate_connection()
        self.unsent: dict[int, bytes] = {}
        self.data: dict[int, bytes] = {}
        self.ended: dict[int, int | None] = {}  # stream -> grpc-status (None: reset)

    def events(self) -> None:
        for event in self.core.events:
            if isinstance(event, DeadlineSet):
                assert event.stream_id not in self.armed and event.seconds == 100.0
                self.armed.add(event.stream_id)
            elif isinstance(event, DeadlineCleared):
                self.armed.remove(event.stream_id)
            else:
                raise AssertionError(f"unexpected event {event}")
        self.core.events.clear()
        for sid in self.armed:  # an armed deadline belongs to a stream still open
            assert self.core.state_of(sid) in (StreamState.OPEN, StreamState.CLOSING), sid
        assert self.core.held_bytes >= 0

    def to_server(self) -> None:
        out = self.client.data_to_send()
        cuts = sorted(set(self.draw.draw(st.lists(st.integers(1, max(len(out), 1)), max_size=3))))
        for a, b in zip([0, *cuts], [*cuts, len(out)], strict=True):
            if b > a:
                self.now += self.draw.draw(st.sampled_from([0.0, 0.001, 0.5]), label="time")
                self.to_client_bytes += self.core.receive_data(out[a:b], self.now)
                self.events()
        assert not self.core.closed, self.to_client_bytes[-40:]

    def to_client(self) -> None:
        out, self.to_client_bytes = self.to_client_bytes, b""
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
        while self.unsent.get(sid) and sid not in self.ended:
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
def test_random_sessions_of_a_reference_client_against_the_core(data: st.DataObject) -> None:
    s = CoreSession(data)
    s.to_server()
    s.to_client()
    streams = [2 * i + 1 for i in range(data.draw(st.integers(1, 4), label="streams"))]
    reset: set[int] = set()
    expired: set[int] = set()
    for i, sid in enumerate(streams):
        s.client.send_headers(sid, TIMEOUT_HEADERS if data.draw(st.booleans(), label="deadline") else HEADERS)
        s.unsent[sid] = _exchange(i, data.draw(st.sampled_from([10, 3000, 70_000]), label="body"))
    for _ in range(200):
        open_ = [sid for sid in streams if sid not in s.ended and sid not in reset]
        if not open_:
            break
        action = data.draw(st.sampled_from(["send"] * 4 + ["ping", "settings", "update", "reset", "expire"]))
        sid = data.draw(st.sampled_from(open_))
        if action == "send":
            s.send_some(sid)
        elif action == "ping":
            s.client.ping(b"12345678")
        elif action == "settings":
            window = data.draw(st.integers(1 << 14, 1 << 20))
            s.client.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        elif action == "update":
            s.client.increment_flow_control_window(data.draw(st.integers(1, 1 << 20)))
        elif action == "reset" and data.draw(st.integers(0, 9)) == 0:
            s.client.reset_stream(sid)
            reset.add(sid)
        elif action == "expire" and sid in s.armed and data.draw(st.integers(0, 4)) == 0:
            s.armed.remove(sid)  # the adapter's timer fired
            s.to_client_bytes += s.core.expire(sid)
            expired.add(sid)
            s.events()
        s.to_server()
        s.to_client()
    else:
        raise AssertionError(f"stalled: unsent {[len(s.unsent[sid]) for sid in streams]}, ended {s.ended}")
    for sid in streams:
        if sid in reset:
            continue
        assert s.ended.get(sid) == (4 if sid in expired else 0), (sid, s.ended)
    assert s.armed == set() and s.core.open_streams == 0 and s.core.held_bytes == 0
