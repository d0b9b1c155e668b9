"""A lean HTTP/1.1 GET client on ``asyncio.Protocol`` with keep-alive, for high-rate scraping.

Why: at a 50 ms interval a picker scrapes 20 times a second per endpoint; a general-purpose client
spends most of its per-request CPU in machinery a plain GET does not need (see docs/datalayer.md for
the measured difference). This client does only what scraping needs, correctly:

* ``http://host:port/path`` only (``https`` URLs are refused with :class:`FetchError`; use
  :class:`~datalayer.http.aiohttp_client.AiohttpClient` for TLS); no redirects, no compression (none
  is requested);
* one idle-connection pool per ``host:port``; a connection is reused only after a complete response
  without ``Connection: close``; a reused connection that the server had already closed is retried
  once on a fresh connection (nothing was received, so the GET is safely repeated);
* interim ``1xx`` responses are skipped; ``204`` / ``304`` have no body;
* responses parsed by ``httptools`` (llhttp, Node's parser) in its strict mode: a malformed response
  (duplicate ``Content-Length``, a chunk size that is not plain hex, chunk data without its CRLF, a
  space before a header's colon, ...) fails at once as ``malformed HTTP response: <llhttp's reason>``;
  a ``Transfer-Encoding`` other than ``chunked`` alone is refused;
* bodies delimited by ``Content-Length``, ``Transfer-Encoding: chunked`` (trailers skipped) or by
  connection close (HTTP/1.0 style); a body that ends early is an error (truncation is detected);
* ``max_bytes`` caps the body: a larger ``Content-Length`` fails before reading, a larger chunked or
  close-delimited body fails as soon as the cap is passed, and the connection is dropped;
* ``timeout`` bounds connect + response; on timeout the connection is dropped.
"""

from __future__ import annotations

import asyncio
from typing import cast
from urllib.parse import urlsplit

import httptools

from datalayer.http.base import FetchError, HttpResponse, too_large

__all__ = ["RawHttpClient"]

_MAX_HEAD = 64 * 1024


class _Conn(asyncio.Protocol):
    """One keep-alive connection; each response is parsed by a fresh ``httptools`` (llhttp) parser.

    llhttp is strict: conflicting or malformed ``Content-Length``, chunk sizes that are not plain hex,
    chunk data without its CRLF, header names with spaces and the like fail the response at once with
    llhttp's reason. A ``Transfer-Encoding`` other than ``chunked`` alone is refused too (nothing else is
    requested, and a response with one would otherwise be read until the server closes).
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        self.received_any = False
        self._waiter: asyncio.Future[HttpResponse] | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._max = 0
        self._head_bytes = 0
        self._status = 0
        self._in_body = False  # the final response's head is complete
        self._delimited = False  # Content-Length or chunked seen (else: close-delimited)
        self._parts: list[bytes] = []
        self._size = 0
        self._keep_alive = False
        self._result: HttpResponse | None = None
        self._error: FetchError | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def request(self, data: bytes, max_bytes: int) -> asyncio.Future[HttpResponse]:
        assert self.transport is not None
        self._parser = httptools.HttpResponseParser(self)
        self._max = max_bytes
        self._head_bytes = 0
        self._in_body = self._delimited = self._keep_alive = False
        self._parts, self._size = [], 0
        self._result = self._error = None
        self.received_any = False
        self.reusable = False
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter

    # -- httptools callbacks (an exception raised here stops the parser) --

    def on_message_begin(self) -> None:
        if self._result is not None:
            raise self._stop(FetchError("unsolicited bytes after the response"))

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        if key == b"content-length":  # llhttp has checked the digits and refuses duplicates
            self._delimited = True
            if int(value) > self._max:
                raise self._stop(too_large(self._max))
        elif key == b"transfer-encoding":
            if value.strip().lower() != b"chunked":
                text = value.decode("latin-1")[:40]
                raise self._stop(FetchError(f"unsupported Transfer-Encoding {text!r} (only chunked)"))
            self._delimited = True

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        self._status = self._parser.get_status_code()
        if not 100 <= self._status < 200:
            self._in_body = True
            self._keep_alive = self._parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._max:
            raise self._stop(too_large(self._max))
        self._parts.append(body)

    def on_message_complete(self) -> None:
        if self._in_body:
            self._result = HttpResponse(self._status, b"".join(self._parts))
        else:  # an interim 1xx response: the final one follows
            self._delimited = False
            self._parts, self._size = [], 0

    def _stop(self, error: FetchError) -> FetchError:
        self._error = error
        return error

    # -- asyncio.Protocol --

    def data_received(self, data: bytes) -> None:
        waiter, parser = self._waiter, self._parser
        if waiter is None or waiter.done() or parser is None:
            self._abort()  # unsolicited bytes: the connection is out of sync
            return
        self.received_any = True
        if not self._in_body:
            self._head_bytes += len(data)
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self._result is None:
                self._fail(self._error or FetchError(f"malformed HTTP response: {exc}"))
                return
            self._keep_alive = False  # a complete response followed by bytes nobody asked for
        result = self._result
        if result is None:
            if not self._in_body and self._head_bytes > _MAX_HEAD:
                self._fail(FetchError("response head too large"))
            return
        self.reusable = self._keep_alive
        waiter.set_result(result)
        if not self._keep_alive:
            self._abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._in_body and not self._delimited and self._error is None:
            waiter.set_result(HttpResponse(self._status, b"".join(self._parts)))  # close-delimited body
            return
        what = "response body truncated" if self._in_body else "connection closed before a response"
        waiter.set_exception(FetchError(what if exc is None else f"{what} ({exc})"))

    def _abort(self) -> None:
        self.reusable = False
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: FetchError) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self._abort()


class RawHttpClient:
    """:class:`~datalayer.http.HttpClient` for plain-HTTP scraping with per-host keep-alive pools."""

    def __init__(self, *, max_idle_per_host: int = 4) -> None:
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._requests: dict[str, tuple[tuple[str, int], bytes]] = {}
        self._max_idle = max_idle_per_host
        self._closed = False

    def _target(self, url: str) -> tuple[tuple[str, int], bytes]:
        cached = self._requests.get(url)
        if cached is not None:
            return cached
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise FetchError(f"unsupported URL {url!r} (RawHttpClient speaks plain http only)")
        port = parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = parts.netloc.encode("idna")
        request = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + host_header + b"\r\nAccept: */*\r\n\r\n"
        target = ((parts.hostname, port), request)
        if len(self._requests) < 65536:
            self._requests[url] = target
        return target

    async def get(self, url: str, *, timeout: float, max_bytes: int) -> HttpResponse:
        if self._closed:
            raise FetchError("client closed")
        key, request = self._target(url)
        try:
            async with asyncio.timeout(timeout):
                idle = self._idle.get(key)
                while idle:
                    conn = idle.pop()
                    if conn.closed:
                        continue
                    try:
                        return await self._exchange(key, conn, request, max_bytes)
                    except FetchError:
                        if conn.received_any:
                            raise
                        break  # stale keep-alive connection: retry once on a fresh one
                loop = asyncio.get_running_loop()
                try:
                    _, conn = await loop.create_connection(_Conn, key[0], key[1])
                except OSError as exc:
                    raise FetchError(f"connect failed: {exc.strerror or exc}") from None
                return await self._exchange(key, conn, request, max_bytes)
        except TimeoutError:
            raise FetchError(f"timed out after {timeout:g}s") from None

    async def _exchange(
        self, key: tuple[str, int], conn: _Conn, request: bytes, max_bytes: int
    ) -> HttpResponse:
        try:
            response = await conn.request(request, max_bytes)
        except BaseException:
            conn._abort()
            raise
        if conn.reusable and not conn.closed and not self._closed:
            idle = self._idle.setdefault(key, [])
            if len(idle) < self._max_idle:
                idle.append(conn)
            else:
                conn._abort()
        return response

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn._abort()
        self._idle.clear()
