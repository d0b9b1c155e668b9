"""RawHttpClient is strict on the wire: malformed responses from a real socket server fail at once.

Each server keeps its connection open after the reply, so a client that waited for more bytes would
only fail on its timeout (10 s here), with a "timed out" message the assertions reject.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from datalayer import DataLayer, DataLayerOptions, StaticDiscovery
from datalayer.discovery import SpecTracker, make_spec
from datalayer.http import FetchError
from datalayer.http.rawhttp import RawHttpClient
from datalayer.poller import PollSettings, SourcePoller
from datalayer.records import Health
from datalayer.sources import MetricsDataSource

CAP = 64 * 1024
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


class _Replier(asyncio.Protocol):
    """Answers each request head with ``reply`` and keeps the connection open."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if b"\r\n\r\n" in data:
            self.transport.write(self.reply)  # type: ignore[attr-defined]


async def _serve(reply: bytes) -> tuple[asyncio.AbstractServer, str]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Replier(reply), "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def client() -> AsyncIterator[RawHttpClient]:
    http = RawHttpClient()
    try:
        yield http
    finally:
        await http.aclose()


BAD_SIZE = "malformed HTTP response: Invalid character in chunk size"
MALFORMED = [
    pytest.param(
        HEAD + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "malformed HTTP response: Duplicate Content-Length",
        id="conflicting-content-length",
    ),
    pytest.param(CHUNKED + b"0x3\r\nabc\r\n0\r\n\r\n", BAD_SIZE, id="chunk-size-0x3"),
    pytest.param(CHUNKED + b"0_3\r\nabc\r\n0\r\n\r\n", BAD_SIZE, id="chunk-size-0_3"),
    pytest.param(CHUNKED + b"3\r\nabcXY0\r\n\r\n", "expected LF after chunk data", id="no-crlf-after-chunk"),
    pytest.param(
        HEAD + b"Content-Length : 3\r\n\r\nabc", "Invalid header field char", id="space-before-colon"
    ),
    pytest.param(CHUNKED + b"-3\r\nabc\r\n0\r\n\r\n", BAD_SIZE, id="chunk-size-minus-3"),
    pytest.param(
        HEAD + b"Transfer-Encoding: notchunked\r\n\r\nabc",
        "unsupported Transfer-Encoding 'notchunked'",
        id="transfer-encoding-notchunked",
    ),
    pytest.param(
        HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "unsupported Transfer-Encoding 'gzip, chunked'",
        id="transfer-encoding-gzip",
    ),
]


@pytest.mark.parametrize(("reply", "message"), MALFORMED)
async def test_malformed_response_is_a_scrape_error(
    client: RawHttpClient, reply: bytes, message: str
) -> None:
    server, address = await _serve(reply)
    try:
        with pytest.raises(FetchError) as caught:
            await client.get(f"http://{address}/metrics", timeout=10.0, max_bytes=CAP)
        assert message.lower() in str(caught.value).lower()
    finally:
        server.close()


async def test_identical_duplicate_content_length_is_rejected_too(client: RawHttpClient) -> None:
    server, address = await _serve(HEAD + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc")
    try:
        with pytest.raises(FetchError, match="Duplicate Content-Length"):
            await client.get(f"http://{address}/metrics", timeout=10.0, max_bytes=CAP)
    finally:
        server.close()


async def test_a_good_response_after_a_malformed_one_uses_a_fresh_connection(client: RawHttpClient) -> None:
    bad, bad_address = await _serve(CHUNKED + b"0x3\r\nabc\r\n0\r\n\r\n")
    good, good_address = await _serve(HEAD + b"Content-Length: 2\r\n\r\nok")
    try:
        with pytest.raises(FetchError):
            await client.get(f"http://{bad_address}/metrics", timeout=10.0, max_bytes=CAP)
        for _ in range(3):
            resp = await client.get(f"http://{good_address}/metrics", timeout=10.0, max_bytes=CAP)
            assert (resp.status, resp.body) == (200, b"ok")
    finally:
        bad.close()
        good.close()


async def test_the_endpoint_reports_the_malformed_response(client: RawHttpClient) -> None:
    """The scrape error reaches the endpoint's record (what the picker logs and exposes)."""
    server, address = await _serve(HEAD + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd")
    try:
        layer = DataLayer(StaticDiscovery.from_addresses([address]), http=client, options=DataLayerOptions())
        layer.apply(SpecTracker().update([make_spec(address)]))
        poller = SourcePoller(
            address, MetricsDataSource(), layer._store, layer._specs, client,
            PollSettings(0.05, 10.0, CAP), asyncio.get_running_loop().time, asyncio.sleep,
        )  # type: ignore[arg-type]  # fmt: skip
        await poller.poll_once()
        (record,) = layer.snapshot()
        assert record.health is Health.UNHEALTHY
        assert record.last_error == "/metrics: malformed HTTP response: Duplicate Content-Length"
    finally:
        server.close()
