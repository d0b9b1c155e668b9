"""Throwaway PKI for TLS tests: a CA, a server certificate (localhost, 127.0.0.1) and a client one.

The certificates carry what RFC 5280 asks for (key identifiers, the CA's key usage), so Python 3.13's
strict default verification accepts them."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer if issuer is not None else (name, key)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        # Key identifiers: Python 3.13's default contexts verify with VERIFY_X509_STRICT (RFC 5280),
        # which refuses a certificate without an Authority Key Identifier.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())  # type: ignore[arg-type]


def make_pki(directory: Path, *, rsa_server: bool = False) -> dict[str, Path]:
    """Writes ca.crt, server/tls.crt + tls.key, client.crt + client.key, other-ca.crt + other-client.*
    (a client certificate from an unrelated CA); returns their paths by name."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test-ca", ca_key, None, ca=True)
    server_key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if rsa_server
        else ec.generate_private_key(ec.SECP256R1())
    )
    server = _cert("localhost", server_key, (ca.subject, ca_key), server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("metrics-scraper", client_key, (ca.subject, ca_key))
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_ca = _cert("other-ca", other_key, None, ca=True)
    other_client_key = ec.generate_private_key(ec.SECP256R1())
    other_client = _cert("intruder", other_client_key, (other_ca.subject, other_key))
    (directory / "server").mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    files = {
        "ca": (directory / "ca.crt", ca.public_bytes(pem)),
        "cert": (directory / "server" / "tls.crt", server.public_bytes(pem) + ca.public_bytes(pem)),
        "key": (directory / "server" / "tls.key", _pem_key(server_key)),
        "client_cert": (directory / "client.crt", client.public_bytes(pem)),
        "client_key": (directory / "client.key", _pem_key(client_key)),
        "other_client_cert": (directory / "other-client.crt", other_client.public_bytes(pem)),
        "other_client_key": (directory / "other-client.key", _pem_key(other_client_key)),
    }
    for path, data in files.values():
        path.write_bytes(data)
    out = {name: path for name, (path, _) in files.items()}
    out["server_dir"] = directory / "server"
    return out
