"""The benchmark's httpx client keeps the HttpClient contract, against a real aiohttp server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from bench.httpx_client import HttpxClient
from datalayer.http import FetchError

CAP = 1024


async def _chunked(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for part in (b"a" * 700, b"b" * 300):
        await resp.write(part)
    await resp.write_eof()
    return resp


async def _huge_chunked(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        for _ in range(100):
            await resp.write(b"x" * 512)
    except ConnectionError:
        pass
    return resp


async def _slow(_: web.Request) -> web.Response:
    await asyncio.sleep(5)
    return web.Response(text="late")


ROUTES = {
    "/ok": lambda _: web.Response(text="hello"),
    "/error": lambda _: web.Response(status=503, text="busy"),
    "/huge": lambda _: web.Response(body=b"y" * (CAP + 1)),
}


@pytest.fixture
async def site() -> AsyncIterator[str]:
    app = web.Application()
    for path, reply in ROUTES.items():

        async def handler(request: web.Request, reply=reply) -> web.Response:  # type: ignore[no-untyped-def]
            return reply(request)

        app.router.add_get(path, handler)
    app.router.add_get("/chunked", _chunked)
    app.router.add_get("/huge-chunked", _huge_chunked)
    app.router.add_get("/slow", _slow)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[HttpxClient]:
    http = HttpxClient(max_connections=4)
    try:
        yield http
    finally:
        await http.aclose()


async def test_answers_with_any_status(client: HttpxClient, site: str) -> None:
    ok = await client.get(f"{site}/ok", timeout=2.0, max_bytes=CAP)
    assert (ok.status, ok.body) == (200, b"hello")
    chunked = await client.get(f"{site}/chunked", timeout=2.0, max_bytes=CAP)
    assert (chunked.status, chunked.body) == (200, b"a" * 700 + b"b" * 300)
    error = await client.get(f"{site}/error", timeout=2.0, max_bytes=CAP)
    assert (error.status, error.body) == (503, b"busy")


@pytest.mark.parametrize(
    ("path", "timeout", "message"),
    [
        ("/huge", 3.0, "larger than 1024 bytes"),
        ("/huge-chunked", 3.0, "larger than 1024 bytes"),
        ("/slow", 0.5, "timed out after 0.5s"),
    ],
)
async def test_failures_are_fetch_errors(
    client: HttpxClient, site: str, path: str, timeout: float, message: str
) -> None:
    with pytest.raises(FetchError, match=message):
        await client.get(site + path, timeout=timeout, max_bytes=CAP)
    assert (await client.get(f"{site}/ok", timeout=2.0, max_bytes=CAP)).body == b"hello"  # still usable


async def test_refused_connection_is_a_fetch_error(client: HttpxClient) -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
        with pytest.raises(FetchError, match="ConnectError"):
            await client.get(url, timeout=2.0, max_bytes=CAP)
