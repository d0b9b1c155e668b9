"""A lean HTTP/1.1 GET client on ``asyncio.Protocol`` with keep-alive, for high-rate scraping.

Why: at a 50 ms interval a picker scrapes 20 times a second per endpoint; a general-purpose client
spends most of its per-request CPU in machinery a plain GET does not need (see docs/datalayer.md for
the measured difference). This client does only what scraping needs, correctly:

* ``http://host:port/path`` only (``https`` URLs are refused with :class:`FetchError`; use
  :class:`~datalayer.http.AiohttpClient` for TLS); no redirects, no compression (none is requested);
* one idle-connection pool per ``host:port``; a connection is reused only after a complete response
  without ``Connection: close``; a reused connection that the server had already closed is retried
  once on a fresh connection (nothing was received, so the GET is safely repeated);
* interim ``1xx`` responses are skipped; ``204`` / ``304`` have no body;
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

from datalayer.http import FetchError, HttpResponse

__all__ = ["RawHttpClient"]

_MAX_HEAD = 64 * 1024


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        self.received_any = False
        self._buf = bytearray()
        self._waiter: asyncio.Future[HttpResponse] | None = None
        self._max = 0
        self._status = 0
        self._body_start = -1
        self._length: int | None = None  # Content-Length; None with chunked / close-delimited
        self._chunked = False
        self._keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def request(self, data: bytes, max_bytes: int) -> asyncio.Future[HttpResponse]:
        assert self.transport is not None
        self._buf.clear()
        self._max = max_bytes
        self._body_start = -1
        self.received_any = False
        self.reusable = False
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self._abort()  # unsolicited bytes: the connection is out of sync
            return
        self.received_any = True
        self._buf += data
        try:
            result = self._parse()
        except FetchError as exc:
            self._fail(exc)
            return
        if result is not None:
            self.reusable = self._keep_alive
            self._waiter.set_result(result)
            if not self._keep_alive:
                self._abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._body_start >= 0 and self._length is None and not self._chunked:
            body = bytes(self._buf[self._body_start :])
            waiter.set_result(HttpResponse(self._status, body))  # close-delimited body, complete
            return
        what = "response body truncated" if self._body_start >= 0 else "connection closed before a response"
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

    def _parse_head(self) -> bool:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > _MAX_HEAD:
                raise FetchError("response head too large")
            return False
        lines = bytes(self._buf[:end]).split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise FetchError(f"not an HTTP/1.x response: {lines[0][:60]!r}")
        self._status = int(parts[1])
        self._keep_alive = parts[0] == b"HTTP/1.1"
        self._length, self._chunked = None, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            if key == b"content-length":
                if not value.strip().isdigit():
                    raise FetchError("invalid Content-Length")
                self._length = int(value)
                if self._length > self._max:
                    raise FetchError(f"response body larger than {self._max} bytes")
            elif key == b"transfer-encoding":
                self._chunked = b"chunked" in value.lower()
            elif key == b"connection":
                token = value.strip().lower()
                self._keep_alive = token != b"close" and (self._keep_alive or token == b"keep-alive")
        if self._chunked:
            self._length = None
        elif self._length is None and self._status not in (204, 304) and not 100 <= self._status < 200:
            self._keep_alive = False  # close-delimited body
        self._body_start = end + 4
        return True

    def _parse(self) -> HttpResponse | None:
        while self._body_start < 0:
            if not self._parse_head():
                return None
            if 100 <= self._status < 200:  # interim response: drop it, read the final one
                del self._buf[: self._body_start]
                self._body_start = -1
        start = self._body_start
        if self._status in (204, 304):  # never carry a body
            return HttpResponse(self._status, b"")
        if self._length is not None:
            if len(self._buf) - start < self._length:
                return None
            return HttpResponse(self._status, bytes(self._buf[start : start + self._length]))
        if len(self._buf) - start > self._max + (64 * 1024 if self._chunked else 0):
            raise FetchError(f"response body larger than {self._max} bytes")
        if not self._chunked:
            return None  # close-delimited: completed in connection_lost
        return self._dechunk(start)

    def _dechunk(self, pos: int) -> HttpResponse | None:
        buf = self._buf
        parts: list[bytes] = []
        size_total = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size_text = bytes(buf[pos:eol]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise FetchError(f"invalid chunk size {size_text[:20]!r}") from None
            if size == 0:
                trailer_end = buf.find(b"\r\n\r\n", eol)
                if buf[eol : eol + 4] == b"\r\n\r\n" or trailer_end >= 0:
                    return HttpResponse(self._status, b"".join(parts))
                return None
            if len(buf) < eol + 2 + size + 2:
                return None
            size_total += size
            if size_total > self._max:
                raise FetchError(f"response body larger than {self._max} bytes")
            parts.append(bytes(buf[eol + 2 : eol + 2 + size]))
            pos = eol + 2 + size + 2


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
