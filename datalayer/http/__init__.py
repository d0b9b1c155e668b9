"""HTTP clients of the scrapers, httpx-style: one contract, several implementations.

* :mod:`datalayer.http.base`: the contract (:class:`HttpClient`, :class:`HttpResponse`,
  :class:`FetchError`); it imports no implementation.
* implementations, each importing only the contract (each keeps one keep-alive pool; create and close
  them on the loop that uses them): :class:`~datalayer.http.rawhttp.RawHttpClient` (plain http, the
  cheapest per request: the default for scraping) and :class:`~datalayer.http.aiohttp_client.AiohttpClient`
  (http and https). Measured costs are in docs/datalayer.md; the httpx client the data-layer benchmark
  compares with implements the same contract in ``bench/httpx_client.py``.

This package re-exports all of them; :func:`default_http_client` picks by scheme.
"""

from __future__ import annotations

from datalayer.http.aiohttp_client import AiohttpClient
from datalayer.http.base import FetchError, HttpClient, HttpResponse
from datalayer.http.rawhttp import RawHttpClient

__all__ = [
    "AiohttpClient",
    "FetchError",
    "HttpClient",
    "HttpResponse",
    "RawHttpClient",
    "default_http_client",
]


def default_http_client(scheme: str = "http", *, verify_tls: bool = False) -> HttpClient:
    """The scraping client for ``scheme``: :class:`RawHttpClient` for http, aiohttp for https."""
    if scheme == "https":
        return AiohttpClient(verify_tls=verify_tls)
    return RawHttpClient()
