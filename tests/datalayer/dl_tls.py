"""Throwaway PKI and a tiny HTTPS model server on 127.0.0.1 for the TLS scraping tests.

:func:`make_pki` writes, under a folder: ``ca.pem`` (a CA), ``server.pem`` / ``server.key`` (signed by
it, SAN IP 127.0.0.1), ``client.pem`` / ``client.key`` (signed by ``client-ca.pem``, another CA), and
``other-ca.pem`` (a CA that signed nothing). :class:`MetricsServer` serves ``/metrics`` over TLS
(optionally requiring a client certificate) with keep-alive, and counts requests.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_Key = ec.EllipticCurvePrivateKey


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(
    subject: str,
    key: _Key,
    issuer: str,
    issuer_key: _Key,
    *,
    ca: bool,
    usage: ExtendedKeyUsageOID | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage_ext = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage_ext, critical=True)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: _Key | None = None) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        key_path = path.with_suffix(".key")
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


def make_pki(folder: Path) -> Path:
    keys = {
        n: ec.generate_private_key(ec.SECP256R1()) for n in ("ca", "client-ca", "other", "server", "client")
    }
    _write(folder / "ca.pem", _cert("test ca", keys["ca"], "test ca", keys["ca"], ca=True))
    _write(
        folder / "client-ca.pem",
        _cert("client ca", keys["client-ca"], "client ca", keys["client-ca"], ca=True),
    )
    _write(folder / "other-ca.pem", _cert("other ca", keys["other"], "other ca", keys["other"], ca=True))
    server = _cert(
        "server", keys["server"], "test ca", keys["ca"], ca=False, usage=ExtendedKeyUsageOID.SERVER_AUTH
    )
    _write(folder / "server.pem", server, keys["server"])
    client = _cert(
        "scraper",
        keys["client"],
        "client ca",
        keys["client-ca"],
        ca=False,
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    _write(folder / "client.pem", client, keys["client"])
    return folder


class MetricsServer:
    """HTTPS (plain HTTP when ``pki`` is None) ``/metrics`` and ``/v1/models`` on 127.0.0.1 (64 KiB heads)."""

    def __init__(self, body: str, pki: Path | None, *, require_client_cert: bool = False) -> None:
        self.body = body.encode()
        self.requests = 0
        self.port = 0
        self._ssl: ssl.SSLContext | None = None
        if pki is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(pki / "server.pem", pki / "server.key")
            if require_client_cert:
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(pki / "client-ca.pem")
            self._ssl = context
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> MetricsServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if len(head) > 65536:
                    break
                self.requests += 1
                path = head.split(b" ", 2)[1]
                status, body = b"404 Not Found", b""
                if path == b"/metrics":
                    status, body = b"200 OK", self.body
                elif path == b"/v1/models":
                    status, body = b"200 OK", b'{"object":"list","data":[{"id":"base","parent":null}]}'

                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
