"""Listening side of the HTTP/2 ext_proc engine: sockets, TLS, certificate reload, graceful stop.

TLS uses an :class:`ssl.SSLContext` with ALPN ``h2`` built from the same :class:`~epp.server.tls.CertPair`
the grpc.aio engine uses (a generated pair is written to a private temporary directory, removed at
stop, because OpenSSL loads certificates from files). With a reloading :class:`~epp.server.tls.CertDir`
a task checks the files every ``reload_interval`` seconds and loads a changed, valid pair into the
context, which applies to the next TLS handshake. With ``client_ca`` (PEM) every handshake also requires a
client certificate that CA signed (``--grpc-client-ca-file``).

Admission: each accepted socket's first bytes are peeked (waiting at most ``first_bytes_timeout_s``,
10 s) and a client the port cannot serve (plaintext on the TLS port, TLS on a plaintext port, not
HTTP/2) is closed with a rate-limited warning that names the peer and the fix
(:mod:`epp.server.mismatch`); so is a failed TLS handshake (``ssl_handshake_timeout`` 10 s). A
connection waiting for its first bytes or its handshake holds only its socket.

``stop(grace)``: stop accepting, send GOAWAY on every connection, wait up to ``grace`` seconds for their
streams to finish, then end the rest with outcome SHUTDOWN and close the connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from epp.server.h2.connection import H2Connection
from epp.server.h2.limits import H2Limits
from epp.server.health import HealthStatus
from epp.server.mismatch import HTTP2_PREFACE, MismatchLog, classify
from epp.server.stream import StreamCore
from epp.server.tls import CertDir, CertPair, apply_tls_overrides, require_client_certificates

__all__ = ["H2Server", "tls_context"]

_log = structlog.get_logger("epp.h2")


def tls_context(
    pair: CertPair, directory: str, min_version: str | None = None, cipher_suites: Sequence[str] = ()
) -> ssl.SSLContext:
    """A server context serving ``pair`` (written under ``directory``), ALPN h2, TLS >= 1.2 unless
    ``min_version`` (a Go name, ``--tls-min-version``) says otherwise; ``cipher_suites`` are Go names
    (``--tls-cipher-suites``, TLS 1.2 and below). Raises TlsError for suites OpenSSL cannot offer."""
    cert, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
    with open(cert, "wb") as fc:
        fc.write(pair.cert_pem)
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fk:
        fk.write(pair.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["h2"])
    apply_tls_overrides(context, min_version, cipher_suites)
    context.load_cert_chain(cert, key)
    return context


class H2Server:
    def __init__(
        self,
        core: StreamCore,
        *,
        max_message_bytes: int,
        certificate: CertPair | None = None,
        reload_from: CertDir | None = None,
        reload_interval: float = 1.0,
        max_send_bytes: int = 0,
        tls_min_version: str | None = None,
        tls_cipher_suites: Sequence[str] = (),
        client_ca: bytes | None = None,
        limits: H2Limits | None = None,
        health: HealthStatus | None = None,
        connection: Callable[..., Any] = H2Connection,
    ) -> None:
        """``health``: also serve grpc.health.v1 on this port (``--health-checking``); ``connection``: the
        protocol class of each connection (:class:`H2Connection`, or the ngh2 engine's
        :class:`~epp.server.ngh2.connection.NgH2Connection`, which has the same constructor and surface)."""
        self._connection = connection
        self._core = core
        self._health = health
        self._max_message = max_message_bytes
        self._max_send = max_send_bytes
        self._limits = limits or H2Limits()
        self._tls = (tls_min_version, tuple(tls_cipher_suites))
        self._certificate = certificate
        self._client_ca = client_ca
        self._reload_from = reload_from
        self._reload_interval = reload_interval
        self._connections: set[Any] = set()  # the connections' protocol objects
        self._tmpdir: str | None = None
        self._context: ssl.SSLContext | None = None
        self._reloader: asyncio.Task[None] | None = None
        self._listeners: list[socket.socket] = []
        self._accepting: set[asyncio.Task[None]] = set()  # accept loops and admissions in progress
        self.mismatches = MismatchLog()
        self.first_bytes_timeout_s = 10.0
        self.port = 0

    def _protocol(self) -> Any:
        connection = self._connection(
            self._core,
            self._max_message,
            on_close=self._connections.discard,
            max_send_bytes=self._max_send,
            limits=self._limits,
            health=self._health,
        )
        self._connections.add(connection)
        return connection

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0 = any free port); returns the bound port."""
        if self._certificate is not None:
            self._tmpdir = tempfile.mkdtemp(prefix="epp-tls-")
            self._context = tls_context(self._certificate, self._tmpdir, *self._tls)
            if self._client_ca is not None:
                require_client_certificates(self._context, self._client_ca)
            if self._reload_from is not None:
                self._reloader = asyncio.create_task(self._reload_forever(), name="epp-h2-cert-reload")
        try:
            self._listeners = await _listen(host, port)
        except OSError as exc:
            await self._cleanup()
            raise RuntimeError(f"--grpc-port: cannot listen on {host}:{port}: {exc.strerror}") from None
        self.port = int(self._listeners[0].getsockname()[1])
        for listener in self._listeners:
            self._spawn(self._accept_forever(listener))
        return self.port

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._accepting.add(task)
        task.add_done_callback(self._accepting.discard)

    async def _accept_forever(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError:  # e.g. EMFILE: back off instead of spinning
                await asyncio.sleep(0.1)
                continue
            self._spawn(self._admit(sock, peer))

    async def _admit(self, sock: socket.socket, peer: object) -> None:
        """Hand ``sock`` to a new H2Connection if its client speaks what the port serves."""
        loop = asyncio.get_running_loop()
        tls = self._context is not None
        try:
            first = await _peek(loop, sock, len(HTTP2_PREFACE), self.first_bytes_timeout_s)
        except BaseException as exc:  # silent client, reset, or stop(): the socket is not handed over
            sock.close()
            if isinstance(exc, TimeoutError | OSError):
                return
            raise
        kind = classify(first, tls=tls)
        if kind is not None or not first:
            if kind is not None:
                self.mismatches.report(kind, peer, repr(first[:8]))
            sock.close()
            return
        connection = self._protocol()
        try:
            await loop.connect_accepted_socket(
                lambda: connection, sock, ssl=self._context, ssl_handshake_timeout=10.0 if tls else None
            )
        except BaseException as exc:  # a failed handshake, or stop() during it
            self._connections.discard(connection)
            sock.close()
            if not isinstance(exc, TimeoutError | OSError):
                raise
            if tls:
                self.mismatches.report("handshake-failed", peer, _reason(exc))

    async def _reload_forever(self) -> None:
        while True:
            await asyncio.sleep(self._reload_interval)
            self.reload_once()

    def reload_once(self) -> bool:
        """Load the certificate directory's pair into the TLS context if it changed (True if so)."""
        assert self._reload_from is not None and self._context is not None and self._tmpdir is not None
        pair = self._reload_from.changed()
        if pair is None:
            return False
        cert, key = os.path.join(self._tmpdir, "tls.crt"), os.path.join(self._tmpdir, "tls.key")
        with open(cert, "wb") as fc, open(key, "wb") as fk:
            fc.write(pair.cert_pem)
            fk.write(pair.key_pem)
        self._context.load_cert_chain(cert, key)
        return True

    async def stop(self, grace: float) -> None:
        for task in list(self._accepting):
            task.cancel()
        await asyncio.gather(*self._accepting, return_exceptions=True)
        for listener in self._listeners:
            listener.close()
        self._listeners = []
        for connection in list(self._connections):
            connection.goaway()
        deadline = time.monotonic() + grace
        while any(c.open_streams for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self._connections):
            connection.abort_all()
        await self._cleanup()

    async def _cleanup(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
            self._reloader = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


async def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address of ``host`` (all interfaces for "" / None), as
    ``loop.create_server`` makes them: SO_REUSEADDR, IPv6 sockets v6-only, non-blocking."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # every address on the port the first one got
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(1024)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int, timeout: float) -> bytes:
    """Up to ``n`` bytes the client sent first, left in the socket (b"": it closed without sending)."""
    readable = loop.create_future()
    fd = sock.fileno()

    def wake() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await asyncio.wait_for(readable, timeout)
    finally:
        loop.remove_reader(fd)
    return sock.recv(n, socket.MSG_PEEK)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "no handshake within 10 s"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return str(exc) or type(exc).__name__
