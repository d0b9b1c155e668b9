"""Explaining the ext_proc connections the picker cannot serve (the ``--grpc-engine=h2`` listener).

Before a connection reaches the HTTP/2 engine, its first bytes are peeked (not consumed) and classified
by :func:`classify` against what the port serves:

* ``plaintext-on-tls``: the port serves TLS (``--secure-serving``, the default) and the client speaks
  plaintext, typically Envoy with a config rendered ``--picker-plaintext``; Envoy then answers its
  client an empty HTTP 500.
* ``tls-on-plaintext``: the port is plaintext (``--secure-serving=false``) and the client starts a TLS
  handshake (an Envoy config rendered without ``--picker-plaintext``).
* ``not-http2``: the bytes are neither a TLS handshake nor the HTTP/2 preface (e.g. ``curl`` or a
  browser pointed at the ext_proc port rather than at Envoy's listener).
* ``handshake-failed``: TLS on both sides, but the handshake failed (versions, cipher suites, ALPN,
  a client that verifies the self-signed certificate, ...).

Each is logged as one warning (visible at every ``-v``) naming the peer and the flag to change on each
side, then the connection is closed. :class:`MismatchLog` rate-limits them: at most one warning per
kind per ``interval_s`` (60 s); the next one says how many were not logged meanwhile. Its state is one
entry per kind (four at most).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

__all__ = ["HTTP2_PREFACE", "MismatchLog", "classify", "explain"]

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_TLS_HANDSHAKE = 0x16  # first byte of a TLS record carrying a ClientHello

_log = structlog.get_logger("epp.h2")


def classify(first: bytes, *, tls: bool) -> str | None:
    """The mismatch kind of a connection whose first bytes are ``first`` (None: servable, or nothing
    was sent). ``tls``: the port serves TLS."""
    if not first:
        return None
    starts_tls = first[0] == _TLS_HANDSHAKE
    if tls:
        return None if starts_tls else "plaintext-on-tls"
    if starts_tls:
        return "tls-on-plaintext"
    n = min(len(first), len(HTTP2_PREFACE))
    return None if first[:n] == HTTP2_PREFACE[:n] else "not-http2"


def explain(kind: str, detail: str = "") -> tuple[str, str]:
    """(what happened, the likely fix) for a mismatch ``kind``."""
    if kind == "plaintext-on-tls":
        return (
            "a plaintext client connected to the TLS ext_proc port; closed (Envoy answers its client 500)",
            "serve plaintext with --secure-serving=false, or give the client TLS (an Envoy config "
            "rendered without --picker-plaintext: python -m devtools.envoy_config ...)",
        )
    if kind == "tls-on-plaintext":
        return (
            "a TLS client connected to the plaintext ext_proc port (--secure-serving=false); closed",
            "drop --secure-serving=false (TLS is the default), or make the client plaintext (an Envoy "
            "config rendered with --picker-plaintext)",
        )
    if kind == "not-http2":
        return (
            "a client that does not speak HTTP/2 gRPC connected to the ext_proc port "
            f"(first bytes {detail}); closed",
            "send requests to Envoy's listener, not to the picker's --grpc-port",
        )
    return (
        f"TLS handshake failed on the ext_proc port: {detail}; closed",
        "check the client's TLS settings against --tls-min-version and --tls-cipher-suites (ALPN h2); "
        "with the self-signed default certificate the client must not verify it (or pass --cert-path); "
        "a plaintext client needs --secure-serving=false",
    )


@dataclass(slots=True)
class _Kind:
    last: float
    suppressed: int = 0


@dataclass(slots=True)
class MismatchLog:
    """Rate-limited warnings for mismatched connections: one per kind per ``interval_s``."""

    interval_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    emit: Callable[..., object] = field(default=_log.warning)
    _kinds: dict[str, _Kind] = field(default_factory=dict)

    def report(self, kind: str, peer: object, detail: str = "") -> bool:
        """Log ``kind`` for ``peer`` unless one was logged in the last ``interval_s`` (True if logged)."""
        now = self.clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen.last < self.interval_s:
            seen.suppressed += 1
            return False
        suppressed = seen.suppressed if seen is not None else 0
        self._kinds[kind] = _Kind(now)
        what, fix = explain(kind, detail)
        fields: dict[str, object] = {"peer": _peer(peer), "fix": fix, "kind": kind}
        if suppressed:
            fields["not_logged_since_last"] = suppressed
        self.emit(what, **fields)
        return True


def _peer(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(peer)
