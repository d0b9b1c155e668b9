"""The HTTP seam of the scrapers: a tiny ``GET`` contract with a timeout and a body-size cap.

:class:`HttpClient` is what pollers call; tests inject fakes. Implementations must raise
:class:`FetchError` (never anything else) for refused connections, timeouts, protocol errors and bodies
larger than ``max_bytes`` (they stop reading at the cap, so a server streaming gigabytes costs
``max_bytes``). Non-2xx statuses are not errors here: the caller decides.

This module is the contract only; the implementations (:mod:`datalayer.http.rawhttp`,
:mod:`datalayer.http.aiohttp_client`, :mod:`datalayer.http.httpx_client`) import it and nothing
imports them back (see :mod:`datalayer.http`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["FetchError", "HttpClient", "HttpResponse", "too_large"]


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


def too_large(max_bytes: int) -> FetchError:
    """The :class:`FetchError` of a body over ``max_bytes`` (one wording for every implementation)."""
    return FetchError(f"response body larger than {max_bytes} bytes")
