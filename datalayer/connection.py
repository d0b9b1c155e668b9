"""How a data source reaches an endpoint (scheme, port, TLS) and the HTTP clients that do it.

:class:`SourceConnection` is what a source's parameters set (``scheme``, ``port``,
``insecureSkipVerify``, ``caCertPath``, ``clientCertPath``, ``clientKeyPath``); a field left ``None``
takes the layer's value (the ``--model-server-metrics-*`` flags). :meth:`SourceConnection.resolve`
gives the effective :class:`Connection`.

TLS, as the Go EPP does it (llm-d-router ``source/http``), applies to ``https`` only:

* ``insecure_skip_verify`` (default true) accepts any server certificate; ``ca_cert_path`` is then
  ignored;
* otherwise the server certificate (and its host name or IP address) is verified against
  ``ca_cert_path`` (a PEM bundle that replaces the system roots) or, without one, the system roots;
* ``client_cert_path`` + ``client_key_path`` (both or neither) present a client certificate (mTLS).

:meth:`TlsSettings.ssl_context` reads the files and raises :class:`TlsSettingsError` naming the file.

:class:`HttpClients` hands each connection its client: connections equal to the layer's default share
the injected client; any other (another scheme or TLS material) gets a client of its own, created once
per distinct connection (at most one per configured source) and closed by :meth:`HttpClients.aclose`.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from datalayer.http import AiohttpClient, HttpClient, RawHttpClient

__all__ = [
    "Connection",
    "HttpClients",
    "SourceConnection",
    "TlsSettings",
    "TlsSettingsError",
    "default_client_factory",
]


class TlsSettingsError(ValueError):
    """A CA bundle or client certificate cannot be used (the message names the file)."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Verification and client-certificate settings of an https scrape (see the module docstring)."""

    insecure_skip_verify: bool = True
    ca_cert_path: str = ""
    client_cert_path: str = ""
    client_key_path: str = ""

    def ssl_context(self) -> ssl.SSLContext:
        """A client context for these settings; reads the files now. Raises :class:`TlsSettingsError`."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif self.ca_cert_path:
            try:
                with open(self.ca_cert_path, "rb") as f:
                    pem = f.read()
            except OSError as exc:
                raise TlsSettingsError(
                    f"reading CA cert {self.ca_cert_path}: {exc.strerror or exc}"
                ) from None
            try:
                context.load_verify_locations(cadata=pem.decode("ascii", errors="replace"))
            except (ssl.SSLError, ValueError):
                raise TlsSettingsError(f"no valid CA certs in {self.ca_cert_path}") from None
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if self.client_cert_path or self.client_key_path:
            if not (self.client_cert_path and self.client_key_path):
                raise TlsSettingsError(
                    "loading client cert: clientCertPath and clientKeyPath must be set together"
                )
            try:
                context.load_cert_chain(self.client_cert_path, self.client_key_path)
            except OSError as exc:  # ssl.SSLError is an OSError
                reason = exc.strerror or str(exc)
                raise TlsSettingsError(
                    f"loading client cert {self.client_cert_path} / key {self.client_key_path}: {reason}"
                ) from None
        return context


@dataclass(frozen=True, slots=True)
class Connection:
    """The effective scheme, port override (0: the endpoint's port) and TLS settings of a source."""

    scheme: str = "http"
    port: int = 0
    tls: TlsSettings = field(default_factory=TlsSettings)

    @property
    def client_key(self) -> tuple[str, TlsSettings | None]:
        """What decides the HTTP client: the scheme, and the TLS settings for https."""
        return (self.scheme, self.tls if self.scheme == "https" else None)


@dataclass(frozen=True, slots=True)
class SourceConnection:
    """A source's own connection parameters; ``None`` / empty takes the layer's value."""

    scheme: str | None = None
    port: int | None = None
    insecure_skip_verify: bool | None = None
    ca_cert_path: str = ""
    client_cert_path: str = ""
    client_key_path: str = ""

    def resolve(self, default: Connection) -> Connection:
        """This source's effective connection, given the layer's (flag) defaults."""
        skip = (
            default.tls.insecure_skip_verify
            if self.insecure_skip_verify is None
            else self.insecure_skip_verify
        )
        tls = TlsSettings(
            skip,
            self.ca_cert_path or default.tls.ca_cert_path,
            self.client_cert_path or default.tls.client_cert_path,
            self.client_key_path or default.tls.client_key_path,
        )
        return Connection(
            self.scheme or default.scheme,
            default.port if self.port is None else self.port,
            tls,
        )


ClientFactory = Callable[[Connection], HttpClient]


def default_client_factory(connection: Connection) -> HttpClient:
    """:class:`~datalayer.http.rawhttp.RawHttpClient` for http, aiohttp with the TLS context for https."""
    if connection.scheme == "https":
        return AiohttpClient(ssl_context=connection.tls.ssl_context())
    return RawHttpClient()


class HttpClients:
    """The client of each connection: ``shared`` for ``default``'s, one created per other connection."""

    def __init__(
        self, shared: HttpClient, default: Connection, factory: ClientFactory = default_client_factory
    ) -> None:
        self._shared = shared
        self._default_key = default.client_key
        self._factory = factory
        self._own: dict[tuple[str, TlsSettings | None], HttpClient] = {}

    def client_for(self, connection: Connection) -> HttpClient:
        """The client for ``connection`` (created now if new; may raise :class:`TlsSettingsError`)."""
        key = connection.client_key
        if key == self._default_key:
            return self._shared
        client = self._own.get(key)
        if client is None:
            client = self._own[key] = self._factory(connection)
        return client

    async def aclose(self) -> None:
        """Close the clients created here (not the shared one: its owner closes it)."""
        own, self._own = list(self._own.values()), {}
        for client in own:
            await client.aclose()
