"""Connections the ext_proc port cannot serve are classified, explained and rate-limited."""

from __future__ import annotations

import pytest

from epp.server.mismatch import HTTP2_PREFACE, MismatchLog, classify

CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"


@pytest.mark.parametrize(
    "first, tls, kind",
    [
        (HTTP2_PREFACE, True, "plaintext-on-tls"),
        (b"GET / HTTP/1.1\r\n", True, "plaintext-on-tls"),
        (CLIENT_HELLO, True, None),
        (CLIENT_HELLO, False, "tls-on-plaintext"),
        (HTTP2_PREFACE, False, None),
        (HTTP2_PREFACE[:5], False, None),  # the preface may arrive in pieces
        (b"POST /v1/completions HTTP/1.1\r\n", False, "not-http2"),
        (b"", True, None),
        (b"", False, None),
    ],
)
def test_first_bytes_are_classified_against_what_the_port_serves(
    first: bytes, tls: bool, kind: str | None
) -> None:
    assert classify(first, tls=tls) == kind


def test_one_warning_per_kind_per_interval_naming_peer_and_fix() -> None:
    now = [100.0]
    lines: list[tuple[str, dict[str, object]]] = []
    log = MismatchLog(interval_s=60.0, clock=lambda: now[0], emit=lambda msg, **kw: lines.append((msg, kw)))
    assert log.report("plaintext-on-tls", ("127.0.0.1", 4242))
    assert not log.report("plaintext-on-tls", ("127.0.0.1", 4243))
    assert not log.report("plaintext-on-tls", ("127.0.0.1", 4244))
    assert log.report("tls-on-plaintext", ("::1", 5000, 0, 0))  # another kind is not held back
    now[0] += 61
    assert log.report("plaintext-on-tls", ("127.0.0.1", 4245))
    assert len(lines) == 3
    (first, f1), (second, f2), (_third, f3) = lines
    assert "plaintext client" in first and f1["peer"] == "127.0.0.1:4242"
    assert "--secure-serving=false" in str(f1["fix"]) and "--picker-plaintext" in str(f1["fix"])
    assert "TLS client" in second and f2["peer"] == "[::1]:5000"
    assert "--secure-serving=false" in str(f2["fix"]) and "--picker-plaintext" in str(f2["fix"])
    assert f3["not_logged_since_last"] == 2 and "not_logged_since_last" not in f1


def test_handshake_failure_names_the_reason_and_the_tls_flags() -> None:
    lines: list[tuple[str, dict[str, object]]] = []
    log = MismatchLog(emit=lambda msg, **kw: lines.append((msg, kw)))
    log.report("handshake-failed", ("10.1.2.3", 1), "TLSV1_ALERT_UNKNOWN_CA")
    msg, fields = lines[0]
    assert "TLS handshake failed" in msg and "TLSV1_ALERT_UNKNOWN_CA" in msg
    assert "--tls-min-version" in str(fields["fix"]) and "--cert-path" in str(fields["fix"])
