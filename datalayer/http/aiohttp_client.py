"""``AiohttpClient``: the :class:`~datalayer.http.base.HttpClient` contract over ``aiohttp`` (http and
https; the scraping client for https)."""

from __future__ import annotations

import asyncio
import ssl

import aiohttp

from datalayer.http.base import FetchError, HttpResponse, too_large

__all__ = ["AiohttpClient"]


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
                    raise too_large(max_bytes)
                body = await resp.content.read(max_bytes + 1)
                while len(body) <= max_bytes and not resp.content.at_eof():
                    more = await resp.content.read(max_bytes + 1 - len(body))
                    if not more:
                        break
                    body += more
                if len(body) > max_bytes:
                    raise too_large(max_bytes)
                return HttpResponse(resp.status, body)
        except TimeoutError:
            raise FetchError(f"timed out after {timeout:g}s") from None
        except (aiohttp.ClientError, ValueError) as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None

    async def aclose(self) -> None:
        await self._session.close()
