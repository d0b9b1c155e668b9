"""The HTTP seam of the scrapers: a tiny ``GET`` contract with a timeout and a body-size cap.

:class:`HttpClient` is what pollers call; tests inject fakes. Implementations must raise
:class:`FetchError` (never anything else) for refused connections, timeouts, protocol errors and bodies
larger than ``max_bytes`` (they stop reading at the cap, so a server streaming gigabytes costs
``max_bytes``). Non-2xx statuses are not errors here: the caller decides.

Implementations (each keeps one keep-alive pool; create and close them on the loop that uses them):
:class:`~datalayer.rawhttp.RawHttpClient` (plain http, the cheapest per request: the default for
scraping) and :class:`AiohttpClient` (http and https); the benchmark's httpx client is
:class:`bench.httpx_client.HttpxClient`. Measured costs are in docs/datalayer.md;
:func:`default_http_client` picks by scheme.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Protocol

import aiohttp

__all__ = ["AiohttpClient", "FetchError", "HttpClient", "HttpResponse", "default_http_client"]


class FetchError(Exception):
    """The GET did not produce a complete response (the message says why, for ``last_error``)."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes


class HttpClient(Protocol):
    async def get(self, url: str, *, timeout: float, max_bytes: int) -> HttpResponse:
        """GET ``url``; raise :class:`FetchError` on any transport failure or a body over ``max_bytes``."""
        ...

    async def aclose(self) -> None: ...


def _too_large(max_bytes: int) -> FetchError:
    return FetchError(f"response body larger than {max_bytes} bytes")


class AiohttpClient:
    """:class:`HttpClient` over one shared ``aiohttp.ClientSession`` (keep-alive pool).

    TLS: ``ssl_context`` when given (see :class:`~datalayer.connection.TlsSettings`), else the system
    roots when ``verify_tls``, else no verification."""

    def __init__(
        self,
        *,
        max_connections: int = 1024,
        verify_tls: bool = False,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        tls: ssl.SSLContext | bool = ssl_context if ssl_context is not None else verify_tls
        connector = aiohttp.TCPConnector(limit=max_connections, ssl=tls, keepalive_timeout=30)
        self._session = aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=True)

    async def get(self, url: str, *, timeout: float, max_bytes: int) -> HttpResponse:
        try:
            async with asyncio.timeout(timeout), self._session.get(url, allow_redirects=False) as resp:
                declared = resp.content_length
                if declared is not None and declared > max_bytes:
                    raise _too_large(max_bytes)
                body = await resp.content.read(max_bytes + 1)
                while len(body) <= max_bytes and not resp.content.at_eof():
                    more = await resp.content.read(max_bytes + 1 - len(body))
                    if not more:
                        break
                    body += more
                if len(body) > max_bytes:
                    raise _too_large(max_bytes)
                return HttpResponse(resp.status, body)
        except TimeoutError:
            raise FetchError(f"timed out after {timeout:g}s") from None
        except (aiohttp.ClientError, ValueError) as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None

    async def aclose(self) -> None:
        await self._session.close()


def default_http_client(scheme: str = "http", *, verify_tls: bool = False) -> HttpClient:
    """The scraping client for ``scheme``: :class:`RawHttpClient` for http, aiohttp for https."""
    if scheme == "https":
        return AiohttpClient(verify_tls=verify_tls)
    from datalayer.rawhttp import RawHttpClient

    return RawHttpClient()
