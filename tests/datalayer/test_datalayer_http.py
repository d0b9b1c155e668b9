"""Both HTTP clients against real sockets: good bodies, bad servers, caps, timeouts, keep-alive."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from datalayer.http import AiohttpClient, FetchError, HttpClient
from datalayer.http.rawhttp import RawHttpClient

CAP = 64 * 1024


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="hello")


async def _chunked(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for part in (b"a" * 1000, b"b" * 10, b"c"):
        await resp.write(part)
    await resp.write_eof()
    return resp


async def _huge_chunked(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        for _ in range(1000):
            await resp.write(b"x" * 16384)
    except ConnectionError:
        pass
    return resp


async def _slow(_: web.Request) -> web.Response:
    await asyncio.sleep(5)
    return web.Response(text="late")


async def _error(_: web.Request) -> web.Response:
    return web.Response(status=500, text="boom")


async def _huge(_: web.Request) -> web.Response:
    return web.Response(body=b"y" * (CAP + 1))


async def _close(_: web.Request) -> web.Response:
    return web.Response(text="bye", headers={"Connection": "close"})


@pytest.fixture
async def site() -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in [
        ("/ok", _ok),
        ("/chunked", _chunked),
        ("/huge-chunked", _huge_chunked),
        ("/slow", _slow),
        ("/error", _error),
        ("/huge", _huge),
        ("/close", _close),
    ]:
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


class RawServer(asyncio.Protocol):
    """Answers every request with ``reply`` then (optionally) closes; counts connections."""

    connections = 0

    def __init__(self, reply: bytes, close: bool) -> None:
        self.reply, self.close = reply, close

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        RawServer.connections += 1
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if b"\r\n\r\n" in data:
            self.transport.write(self.reply)  # type: ignore[attr-defined]
            if self.close:
                self.transport.close()


async def raw_server(reply: bytes, close: bool = True) -> tuple[asyncio.AbstractServer, str]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: RawServer(reply, close), "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"


CLIENTS: list[Callable[[], Any]] = [RawHttpClient, AiohttpClient]


@pytest.fixture(params=CLIENTS, ids=["raw", "aiohttp"])
async def http(request: pytest.FixtureRequest) -> AsyncIterator[HttpClient]:
    client = request.param()
    try:
        yield client
    finally:
        await client.aclose()


async def _get(http: HttpClient, url: str, timeout: float = 1.0) -> tuple[int, bytes]:
    resp = await http.get(url, timeout=timeout, max_bytes=CAP)
    return resp.status, resp.body


async def test_good_bodies(http: HttpClient, site: str) -> None:
    assert await _get(http, f"{site}/ok") == (200, b"hello")
    assert await _get(http, f"{site}/chunked") == (200, b"a" * 1000 + b"b" * 10 + b"c")
    assert await _get(http, f"{site}/error") == (500, b"boom")
    assert await _get(http, f"{site}/close") == (200, b"bye")
    assert await _get(http, f"{site}/ok") == (200, b"hello")


@pytest.mark.parametrize(
    ("path", "message"),
    [("/huge", "larger than"), ("/huge-chunked", "larger than"), ("/slow", "timed out")],
)
async def test_caps_and_timeouts(http: HttpClient, site: str, path: str, message: str) -> None:
    with pytest.raises(FetchError, match=message):
        await _get(http, site + path, timeout=0.3)
    assert await _get(http, f"{site}/ok") == (200, b"hello")  # the client is still usable


async def test_refused(http: HttpClient) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(FetchError):
        await _get(http, f"http://127.0.0.1:{port}/metrics")


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly a part",  # truncated
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",  # truncated chunk
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",  # bad chunk size
        b"hello there\r\n\r\n",  # not HTTP
        b"",  # closed without a response
    ],
)
async def test_broken_responses(http: HttpClient, reply: bytes) -> None:
    server, url = await raw_server(reply)
    try:
        with pytest.raises(FetchError):
            await _get(http, url)
    finally:
        server.close()


async def test_raw_close_delimited_body_and_reuse() -> None:
    client = RawHttpClient()
    server, url = await raw_server(b"HTTP/1.0 200 OK\r\n\r\nuntil close", close=True)
    keep, keep_url = await raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", close=False)
    try:
        assert await _get(client, url) == (200, b"until close")
        RawServer.connections = 0
        for _ in range(5):
            assert await _get(client, keep_url) == (200, b"ok")
        assert RawServer.connections == 1  # one keep-alive connection reused
    finally:
        server.close()
        keep.close()
        await client.aclose()


async def test_raw_retries_a_stale_keepalive_connection() -> None:
    client = RawHttpClient()
    # The server claims keep-alive but closes after each response: the pooled connection is stale.
    server, url = await raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", close=True)
    try:
        assert await _get(client, url) == (200, b"ok")
        await asyncio.sleep(0.05)
        assert await _get(client, url) == (200, b"ok")
        with pytest.raises(FetchError, match="unsupported URL"):
            await _get(client, "https://127.0.0.1:1/metrics")
    finally:
        server.close()
        await client.aclose()


class _FakeTransport:
    def __init__(self) -> None:
        self.written = b""
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.aborted = True


def _feed(reply: bytes, cuts: list[int], max_bytes: int = CAP) -> tuple[Any, Any]:
    from datalayer.http.rawhttp import _Conn

    async def run() -> tuple[Any, Any]:
        conn = _Conn()
        transport = _FakeTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        future = conn.request(b"GET / HTTP/1.1\r\n\r\n", max_bytes)
        pos = 0
        for cut in [*sorted(set(cuts)), len(reply)]:
            if cut > pos and not future.done():
                conn.data_received(reply[pos:cut])
                pos = cut
        if not future.done():
            conn.connection_lost(None)
        return future, conn

    return asyncio.run(run())


def _chunked_reply(body: bytes, sizes: list[int]) -> bytes:
    out, pos = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 0
    for size in sizes:
        part = body[pos : pos + size]
        if not part:
            break
        out += f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n"
        pos += len(part)
    if pos < len(body):
        out += f"{len(body) - pos:X}\r\n".encode() + body[pos:] + b"\r\n"
    return out + b"0\r\nX-Trailer: t\r\n\r\n"


@settings(max_examples=150, deadline=None)
@given(
    body=st.binary(max_size=3000),
    sizes=st.lists(st.integers(1, 700), max_size=8),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
    chunked=st.booleans(),
)
def test_raw_client_reassembles_any_segmentation(
    body: bytes, sizes: list[int], cuts: list[int], chunked: bool
) -> None:
    if chunked:
        reply = _chunked_reply(body, sizes)
    else:
        reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    future, conn = _feed(reply, cuts)
    assert future.result().body == body and future.result().status == 200
    assert conn.reusable


@settings(max_examples=80, deadline=None)
@given(
    body=st.binary(min_size=1, max_size=2000),
    drop=st.integers(1, 50),
    cuts=st.lists(st.integers(0, 2500), max_size=6),
)
def test_raw_client_detects_truncation(body: bytes, drop: int, cuts: list[int]) -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    future, conn = _feed(reply[: max(0, len(reply) - drop)], cuts)
    with pytest.raises(FetchError):
        future.result()
    assert not conn.reusable


def test_raw_client_caps_chunked_bodies() -> None:
    future, conn = _feed(_chunked_reply(b"z" * 5000, [1000] * 5), [], max_bytes=3000)
    with pytest.raises(FetchError, match="larger than"):
        future.result()
    assert conn.closed


@pytest.mark.parametrize(
    ("reply", "status", "body"),
    [
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b""),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, b"ok"),
        (b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 3\r\nConnection: keep-alive\r\n\r\nabc", 200, b"abc"),
    ],
)
def test_raw_client_status_without_body_and_interim_responses(reply: bytes, status: int, body: bytes) -> None:
    future, conn = _feed(reply, [len(reply) // 2])
    assert (future.result().status, future.result().body) == (status, body)
    assert conn.reusable
