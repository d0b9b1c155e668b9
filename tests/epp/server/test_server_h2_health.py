"""grpc.health.v1 on the h2 engine's ext_proc port (``--health-checking``), driven with bytes.

The core (:class:`~epp.server.h2.core.H2Core`) is fed client frames; the health source is the server's
:class:`~epp.server.health.HealthStatus`, changed between reads. A Watch's waits are the adapter's job: here
the test awaits the call's ``settle()`` itself and hands the answers to ``H2Core.settled``, as the adapter
does.
"""

from __future__ import annotations

import asyncio

import hpack
from grpc_health.v1 import health_pb2
from test_server_h2_core import Client, Handler
from test_server_h2_frames import grpc_message, parse

from epp.server.h2 import frames as f
from epp.server.h2.core import H2Core
from epp.server.h2.events import ExtProcHandler, Suspended
from epp.server.h2.limits import H2Limits
from epp.server.health import EXT_PROC_SERVICE, HealthStatus

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


def call_headers(method: str) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", f"/grpc.health.v1.Health/{method}"),
        (":authority", "epp"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


def started(health: HealthStatus | None, limits: H2Limits | None = None) -> tuple[H2Core, list[Handler]]:
    """A core past the preface and both SETTINGS; ext_proc streams get a fake handler (recorded)."""
    handlers: list[Handler] = []

    def open_stream() -> ExtProcHandler:
        handlers.append(Handler())
        return handlers[-1]

    core = H2Core(open_stream, 1 << 20, limits=limits, health=health)
    core.initiate(0.0)
    core.receive_data(f.PREFACE + f.settings({}) + f.frame(f.SETTINGS, f.ACK, 0), 0.0)
    return core, handlers


def request(client: Client, sid: int, method: str, service: str = "", end: bool = True) -> bytes:
    msg = (
        health_pb2.HealthListRequest() if method == "List" else health_pb2.HealthCheckRequest(service=service)
    )
    return client.headers(sid, call_headers(method)) + f.frame(
        f.DATA, f.END_STREAM if end else 0, sid, grpc_message(msg)
    )


def trailers(out: bytes, sid: int) -> dict[str, str]:
    """The stream's trailers (our trailers are literals without indexing: a fresh decoder reads them)."""
    blocks = [p for k, fl, s, p in parse(out) if k == f.HEADERS and s == sid and fl & f.END_STREAM]
    assert len(blocks) == 1, parse(out)
    return {str(k): str(v) for k, v in hpack.Decoder().decode(blocks[0])}


def statuses(out: bytes, sid: int) -> list[int]:
    data = b"".join(p for k, _, s, p in parse(out) if k == f.DATA and s == sid)
    found, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos + 1 : pos + 5], "big")
        found.append(health_pb2.HealthCheckResponse.FromString(data[pos + 5 : pos + 5 + n]).status)
        pos += 5 + n
    return found


async def test_check_answers_the_status_of_the_known_services_and_not_found_for_others() -> None:
    health = HealthStatus()
    core, client = started(health)[0], Client()
    out = core.receive_data(request(client, 1, "Check"), 0.0)
    assert statuses(out, 1) == [NOT_SERVING]  # not synced yet
    assert trailers(out, 1)["grpc-status"] == "0"
    await health.set_synced(True)
    for sid, service in ((3, ""), (5, EXT_PROC_SERVICE)):
        out = core.receive_data(request(client, sid, "Check", service), 0.0)
        assert statuses(out, sid) == [SERVING] and trailers(out, sid)["grpc-status"] == "0"
    out = core.receive_data(request(client, 7, "Check", "inference-extension"), 0.0)
    assert statuses(out, 7) == []
    assert trailers(out, 7) == {"grpc-status": "5", "grpc-message": "unknown service"}  # NOT_FOUND
    await health.shutting_down()
    out = core.receive_data(request(client, 9, "Check", EXT_PROC_SERVICE), 0.0)
    assert statuses(out, 9) == [NOT_SERVING]
    assert core.open_streams == 0 and core.events == []


async def test_leader_election_gates_the_ext_proc_port_services() -> None:
    health = HealthStatus(leader_election=True)
    core, client = started(health)[0], Client()
    await health.set_synced(True)
    out = core.receive_data(request(client, 1, "Check", EXT_PROC_SERVICE), 0.0)
    assert statuses(out, 1) == [NOT_SERVING]  # synced, not leading
    await health.set_leader(True)
    out = core.receive_data(request(client, 3, "Check", ""), 0.0)
    assert statuses(out, 3) == [SERVING]
    out = core.receive_data(request(client, 5, "Check", "liveness"), 0.0)  # the health port's, not this one's
    assert trailers(out, 5)["grpc-status"] == "5"


async def test_list_reports_the_known_services() -> None:
    health = HealthStatus()
    await health.set_synced(True)
    core, client = started(health)[0], Client()
    out = core.receive_data(request(client, 1, "List"), 0.0)
    data = next(p for k, _, s, p in parse(out) if k == f.DATA and s == 1)
    listed = health_pb2.HealthListResponse.FromString(data[5:])
    assert {name: r.status for name, r in listed.statuses.items()} == {"": SERVING, EXT_PROC_SERVICE: SERVING}
    assert trailers(out, 1)["grpc-status"] == "0"


async def test_watch_sends_the_status_then_one_message_per_change_until_reset() -> None:
    health = HealthStatus()
    core, client = started(health)[0], Client()
    out = core.receive_data(request(client, 1, "Watch", EXT_PROC_SERVICE), 0.0)
    assert statuses(out, 1) == [NOT_SERVING]
    assert not [p for k, fl, s, p in parse(out) if k == f.HEADERS and fl & f.END_STREAM]  # stays open
    [event] = core.events
    assert isinstance(event, Suspended) and event.stream_id == 1
    core.events.clear()
    for change, expected in ((health.set_synced(True), SERVING), (health.shutting_down(), NOT_SERVING)):
        settle = asyncio.ensure_future(event.ext.settle())
        await asyncio.sleep(0)
        assert not settle.done()  # waits for a change
        await change
        out = core.settled(1, await settle)
        assert statuses(out, 1) == [expected]
        [event] = core.events  # waits again
        core.events.clear()
    settle = asyncio.ensure_future(event.ext.settle())
    await asyncio.sleep(0)
    out = core.receive_data(f.rst_stream(1, f.ErrorCode.CANCEL), 0.0)
    assert await asyncio.wait_for(settle, 1) == []  # the reset ends the wait at once
    assert core.open_streams == 0 and core.settled(1, []) == b""
    assert not health._waiters  # nothing kept for the ended watch


async def test_watch_of_an_unknown_service_says_so_and_stays_open() -> None:
    core, client = started(HealthStatus())[0], Client()
    out = core.receive_data(request(client, 1, "Watch", "no-such-service"), 0.0)
    assert statuses(out, 1) == [UNKNOWN] and core.open_streams == 1


async def test_shutdown_ends_watches_with_their_last_status_and_unavailable() -> None:
    health = HealthStatus()
    await health.set_synced(True)
    core, handlers = started(health)
    client = Client()
    core.receive_data(request(client, 1, "Watch"), 0.0)
    core.receive_data(client.headers(3), 0.0)  # an ext_proc stream: graceful stop lets it finish
    core.events.clear()
    await health.shutting_down()
    out = core.goaway()
    assert parse(out)[0][0] == f.GOAWAY
    assert statuses(out, 1) == [NOT_SERVING]
    assert trailers(out, 1) == {"grpc-status": "14", "grpc-message": "the endpoint picker is shutting down"}
    assert core.open_streams == 1 and not handlers[0].ended  # only the watch ended


async def test_watches_count_against_the_concurrent_stream_limit() -> None:
    core, client = started(HealthStatus(), H2Limits(max_concurrent_streams=2))[0], Client()
    core.receive_data(request(client, 1, "Watch") + request(client, 3, "Watch"), 0.0)
    out = core.receive_data(request(client, 5, "Watch"), 0.0)
    assert (f.RST_STREAM, 0, 5, (f.ErrorCode.REFUSED_STREAM).to_bytes(4, "big")) in parse(out)
    assert core.open_streams == 2


async def test_health_is_unimplemented_without_health_checking_and_bad_calls_get_a_status() -> None:
    core, client = started(None)[0], Client()
    out = core.receive_data(request(client, 1, "Check"), 0.0)
    assert trailers(out, 1)["grpc-status"] == "12" and statuses(out, 1) == []  # UNIMPLEMENTED
    core, client = started(HealthStatus())[0], Client()
    out = core.receive_data(client.headers(1, call_headers("Check"), f.END_HEADERS | f.END_STREAM), 0.0)
    assert trailers(out, 1) == {"grpc-status": "13", "grpc-message": "missing request message"}
    out = core.receive_data(
        client.headers(3, call_headers("Check")) + f.frame(f.DATA, 0, 3, b"\0\0\0\0\2\xff\xff"), 0.0
    )
    assert trailers(out, 3)["grpc-status"] == "3"  # INVALID_ARGUMENT: not a HealthCheckRequest
    assert not core.closed and core.open_streams == 0
