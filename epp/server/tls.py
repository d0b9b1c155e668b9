"""TLS for the ext_proc port: a generated self-signed certificate, or a certificate directory.

* :func:`self_signed` makes an ECDSA P-256 key and a self-signed certificate (valid ten years, SANs
  ``localhost``, ``127.0.0.1``, ``::1`` and the given host names), in memory: what GIE does when
  ``--secure-serving`` is on without ``--cert-path``. Envoy connects with TLS but does not verify it.
* :class:`CertDir` reads ``tls.crt`` / ``tls.key`` from ``--cert-path``; with ``--enable-cert-reload``
  :func:`server_credentials` installs gRPC's certificate fetcher, which gRPC calls before every new TLS
  handshake: it compares the files' (mtime, size) and returns the new pair only when they changed, so a
  rotated Kubernetes secret is picked up by the next connection without a restart. A half-written pair
  (the key does not match the certificate) is ignored until it is complete, keeping the old one.

ALPN ``h2`` is negotiated by gRPC itself. Errors name the file and what is wrong (:class:`TlsError`).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["CertDir", "CertPair", "TlsError", "load_certificate", "self_signed", "server_credentials"]

_log = logging.getLogger("epp.tls")


class TlsError(ValueError):
    """A certificate or key cannot be used; the message names the file."""


@dataclass(frozen=True, slots=True)
class CertPair:
    """PEM certificate chain and private key."""

    cert_pem: bytes
    key_pem: bytes


def self_signed(hosts: Sequence[str] = (), *, now: Callable[[], datetime.datetime] | None = None) -> CertPair:
    """A fresh self-signed certificate for ``localhost``, loopback addresses and ``hosts``."""
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for host in ("127.0.0.1", "::1", *hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "pyepp"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pyepp self-signed"),
        ]
    )
    start = (now or (lambda: datetime.datetime.now(datetime.UTC)))() - datetime.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return CertPair(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def _check_pair(pair: CertPair, cert_file: str, key_file: str) -> None:
    try:
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
    except ValueError as exc:
        raise TlsError(f"{cert_file}: not a PEM certificate ({exc})") from None
    try:
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise TlsError(f"{key_file}: not an unencrypted PEM private key ({exc})") from None
    if key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        raise TlsError(f"{key_file}: the private key does not match the certificate in {cert_file}")


class CertDir:
    """``tls.crt`` + ``tls.key`` in a directory, re-read when their (mtime, size) change."""

    def __init__(self, path: str) -> None:
        self.cert_file = os.path.join(path, "tls.crt")
        self.key_file = os.path.join(path, "tls.key")
        self._stamp: tuple[float, ...] | None = None
        self.reloads = 0

    def _stat(self) -> tuple[float, ...]:
        try:
            c, k = os.stat(self.cert_file), os.stat(self.key_file)
        except OSError as exc:
            raise TlsError(f"{exc.filename}: cannot read ({exc.strerror})") from None
        return (c.st_mtime_ns, c.st_size, k.st_mtime_ns, k.st_size)

    def load(self) -> CertPair:
        """Read and check the pair now (raises TlsError)."""
        stamp = self._stat()
        try:
            with open(self.cert_file, "rb") as f:
                cert = f.read()
            with open(self.key_file, "rb") as f:
                key = f.read()
        except OSError as exc:
            raise TlsError(f"{exc.filename}: cannot read ({exc.strerror})") from None
        pair = CertPair(cert, key)
        _check_pair(pair, self.cert_file, self.key_file)
        self._stamp = stamp
        return pair

    def changed(self) -> CertPair | None:
        """The new pair when the files changed since the last load and are valid, else None."""
        try:
            if self._stat() == self._stamp:
                return None
            pair = self.load()
        except TlsError as exc:
            _log.warning("certificate reload skipped: %s", exc)
            return None
        self.reloads += 1
        _log.info("reloaded TLS certificate from %s", self.cert_file)
        return pair


def _config(pair: CertPair) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(pair.key_pem, pair.cert_pem)])


def load_certificate(
    *, cert_path: str | None, reload: bool, hosts: Sequence[str] = ()
) -> tuple[CertPair, CertDir | None]:
    """The pair to serve (generated, or read from ``cert_path``) and, with ``reload``, its source."""
    if cert_path is None:
        return self_signed(hosts), None
    source = CertDir(cert_path)
    return source.load(), source if reload else None


def server_credentials(
    *, cert_path: str | None, reload: bool, hosts: Sequence[str] = ()
) -> tuple[grpc.ServerCredentials, CertPair]:
    """grpc.aio credentials for the ext_proc port and the initial pair (tests trust its certificate)."""
    pair, source = load_certificate(cert_path=cert_path, reload=reload, hosts=hosts)
    if source is None:
        return grpc.ssl_server_credentials([(pair.key_pem, pair.cert_pem)]), pair

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        new = source.changed()
        return None if new is None else _config(new)

    return grpc.dynamic_ssl_server_credentials(_config(pair), fetch), pair
