"""Listening side of the HTTP/2 ext_proc engine: sockets, TLS, certificate reload, graceful stop.

TLS uses an :class:`ssl.SSLContext` with ALPN ``h2`` built from the same :class:`~epp.server.tls.CertPair`
the grpc.aio engine uses (a generated pair is written to a private temporary directory, removed at
stop, because OpenSSL loads certificates from files). With a reloading :class:`~epp.server.tls.CertDir`
a task checks the files every ``reload_interval`` seconds and loads a changed, valid pair into the
context, which applies to the next TLS handshake.

``stop(grace)``: stop accepting, send GOAWAY on every connection, wait up to ``grace`` seconds for their
streams to finish, then end the rest with outcome SHUTDOWN and close the connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Sequence

import structlog

from epp.server.h2.connection import H2Connection
from epp.server.h2.limits import H2Limits
from epp.server.stream import StreamCore
from epp.server.tls import CertDir, CertPair, apply_tls_overrides

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
        limits: H2Limits | None = None,
    ) -> None:
        self._core = core
        self._max_message = max_message_bytes
        self._max_send = max_send_bytes
        self._limits = limits or H2Limits()
        self._tls = (tls_min_version, tuple(tls_cipher_suites))
        self._certificate = certificate
        self._reload_from = reload_from
        self._reload_interval = reload_interval
        self._connections: set[H2Connection] = set()
        self._server: asyncio.Server | None = None
        self._tmpdir: str | None = None
        self._context: ssl.SSLContext | None = None
        self._reloader: asyncio.Task[None] | None = None
        self.port = 0

    def _protocol(self) -> H2Connection:
        connection = H2Connection(
            self._core,
            self._max_message,
            on_close=self._connections.discard,
            max_send_bytes=self._max_send,
            limits=self._limits,
        )
        self._connections.add(connection)
        return connection

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0 = any free port); returns the bound port."""
        if self._certificate is not None:
            self._tmpdir = tempfile.mkdtemp(prefix="epp-tls-")
            self._context = tls_context(self._certificate, self._tmpdir, *self._tls)
            if self._reload_from is not None:
                self._reloader = asyncio.create_task(self._reload_forever(), name="epp-h2-cert-reload")
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(self._protocol, host, port, ssl=self._context)
        except OSError as exc:
            await self._cleanup()
            raise RuntimeError(f"--grpc-port: cannot listen on {host}:{port}: {exc.strerror}") from None
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

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
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.goaway()
        deadline = time.monotonic() + grace
        while any(c.open_streams for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self._connections):
            connection.abort_all()
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None
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
