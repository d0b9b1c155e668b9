"""TLS for the ext_proc port: a generated self-signed certificate, or a certificate directory.

* :func:`self_signed` makes an ECDSA P-256 key and a self-signed certificate (valid ten years, SANs
  ``localhost``, ``127.0.0.1``, ``::1`` and the given host names), in memory: what GIE does when
  ``--secure-serving`` is on without ``--cert-path``. Envoy connects with TLS but does not verify it.
* :class:`CertDir` reads ``tls.crt`` / ``tls.key`` from ``--cert-path``; with ``--enable-cert-reload``
  :func:`server_credentials` installs gRPC's certificate fetcher, which gRPC calls before every new TLS
  handshake: it compares the files' (mtime, size) and returns the new pair only when they changed, so a
  rotated Kubernetes secret is picked up by the next connection without a restart. A half-written pair
  (the key does not match the certificate) is ignored until it is complete, keeping the old one.

With ``--grpc-client-ca-file`` (ours; GIE has no client authentication on this port) the port also
requires a client certificate signed by one of the CAs in that PEM bundle (mutual TLS): a client
without one, or with one from another CA, is refused during the TLS handshake. The bundle is read once
at start (:func:`read_client_ca`); a reloaded server certificate keeps the requirement.

ALPN ``h2`` is negotiated by gRPC itself. Errors name the file and what is wrong (:class:`TlsError`).
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = [
    "GO_CIPHER_SUITES",
    "TLS_VERSIONS",
    "CertDir",
    "CertPair",
    "TlsError",
    "apply_tls_overrides",
    "load_certificate",
    "openssl_ciphers",
    "read_client_ca",
    "require_client_certificates",
    "self_signed",
    "server_credentials",
]

_log = logging.getLogger("epp.tls")


class TlsError(ValueError):
    """A certificate or key cannot be used; the message names the file."""


# ``--tls-min-version`` values (Go's crypto/tls constant names) -> ssl versions.
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's tls.CipherSuites() + tls.InsecureCipherSuites() names -> OpenSSL names. The three TLS 1.3 suites
# map to None: Go accepts their names but TLS 1.3 suites are not configurable (nor are they here).
GO_CIPHER_SUITES: dict[str, str | None] = {
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
}


def openssl_ciphers(names: Sequence[str]) -> str | None:
    """The OpenSSL cipher string for Go cipher suite names (None: keep the defaults; raises TlsError
    for an unknown name). Only TLS 1.3 names given: None, as Go ignores them too."""
    out: list[str] = []
    for name in names:
        if name not in GO_CIPHER_SUITES:
            raise TlsError(f"unknown cipher suite {name!r}")
        openssl = GO_CIPHER_SUITES[name]
        if openssl is not None:
            out.append(openssl)
    return ":".join(out) if out else None


def apply_tls_overrides(
    context: ssl.SSLContext, min_version: str | None, cipher_suites: Sequence[str]
) -> None:
    """``--tls-min-version`` / ``--tls-cipher-suites`` on a server context (raises TlsError when this
    OpenSSL cannot offer any of the named suites)."""
    legacy = ""
    if min_version is not None:
        context.minimum_version = TLS_VERSIONS[min_version]
        if context.minimum_version < ssl.TLSVersion.TLSv1_2:
            legacy = ":@SECLEVEL=0"  # OpenSSL 3 refuses TLS 1.0/1.1 at its default security level
    ciphers = openssl_ciphers(cipher_suites)
    if ciphers is not None or legacy:
        try:
            context.set_ciphers((ciphers or "DEFAULT") + legacy)
        except ssl.SSLError:
            names = ", ".join(cipher_suites)
            raise TlsError(f"this OpenSSL supports none of the cipher suites {names}") from None


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


def read_client_ca(path: str) -> bytes:
    """The PEM CA bundle clients' certificates must chain to (raises TlsError naming ``path`` when it
    cannot be read or holds no certificate)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TlsError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise TlsError(f"{path}: not a PEM certificate bundle ({exc})") from None
    if not certificates:
        raise TlsError(f"{path}: no certificate in the file")
    return data


def require_client_certificates(context: ssl.SSLContext, client_ca: bytes) -> None:
    """Make ``context`` (a server context) demand a client certificate signed by ``client_ca``."""
    context.load_verify_locations(cadata=client_ca.decode("ascii"))
    context.verify_mode = ssl.CERT_REQUIRED


def _config(pair: CertPair, client_ca: bytes | None = None) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(pair.key_pem, pair.cert_pem)], root_certificates=client_ca
    )


def load_certificate(
    *, cert_path: str | None, reload: bool, hosts: Sequence[str] = ()
) -> tuple[CertPair, CertDir | None]:
    """The pair to serve (generated, or read from ``cert_path``) and, with ``reload``, its source."""
    if cert_path is None:
        return self_signed(hosts), None
    source = CertDir(cert_path)
    return source.load(), source if reload else None


def server_credentials(
    *, cert_path: str | None, reload: bool, hosts: Sequence[str] = (), client_ca: bytes | None = None
) -> tuple[grpc.ServerCredentials, CertPair]:
    """grpc.aio credentials for the ext_proc port and the initial pair (tests trust its certificate);
    with ``client_ca`` (PEM) clients must present a certificate it signed."""
    pair, source = load_certificate(cert_path=cert_path, reload=reload, hosts=hosts)
    required = client_ca is not None
    if source is None:
        credentials = grpc.ssl_server_credentials(
            [(pair.key_pem, pair.cert_pem)], root_certificates=client_ca, require_client_auth=required
        )
        return credentials, pair

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        new = source.changed()
        return None if new is None else _config(new, client_ca)

    credentials = grpc.dynamic_ssl_server_credentials(
        _config(pair, client_ca), fetch, require_client_authentication=required
    )
    return credentials, pair
