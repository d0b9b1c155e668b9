"""The httpx scraping client the data-layer benchmark compares with (``epp-bench datalayer --client httpx``).

The picker does not scrape with httpx: at 256 endpoints it saturates a core where the default
:class:`~datalayer.http.rawhttp.RawHttpClient` does not (figures in docs/datalayer.md). It keeps the
:class:`~datalayer.http.HttpClient` contract: :class:`~datalayer.http.FetchError` for refused
connections, timeouts, protocol errors and bodies over ``max_bytes`` (reading stops at the cap); any
status is an answer.
"""

from __future__ import annotations

import asyncio

import httpx

from datalayer.http import FetchError, HttpResponse

__all__ = ["HttpxClient"]


class HttpxClient:
    """:class:`~datalayer.http.HttpClient` over one shared ``httpx.AsyncClient`` (keep-alive pool of
    ``max_connections``; TLS verified only when ``verify_tls``; proxies from the environment ignored)."""

    def __init__(self, *, max_connections: int = 1024, verify_tls: bool = False) -> None:
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client = httpx.AsyncClient(limits=limits, verify=verify_tls, trust_env=False)

    async def get(self, url: str, *, timeout: float, max_bytes: int) -> HttpResponse:
        try:
            async with asyncio.timeout(timeout), self._client.stream("GET", url) as resp:
                declared = resp.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                    raise _too_large(max_bytes)
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise _too_large(max_bytes)
                    chunks.append(chunk)
                return HttpResponse(resp.status_code, b"".join(chunks))
        except TimeoutError:
            raise FetchError(f"timed out after {timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None

    async def aclose(self) -> None:
        await self._client.aclose()


def _too_large(max_bytes: int) -> FetchError:
    return FetchError(f"response body larger than {max_bytes} bytes")
