"""HTTP/2 framing and the few HPACK encodings the ext_proc engine needs (RFC 9113, RFC 7541).

Only what a gRPC server sends is encoded: response headers (``:status 200`` from the static table,
``content-type: application/grpc``) and trailers (``grpc-status``, ``grpc-message``) as literals
without indexing and without Huffman coding, so the peer's HPACK decoder state never depends on ours.
Incoming header blocks are decoded by :mod:`epp.server.h2.headers`.
"""

from __future__ import annotations

import struct
from urllib.parse import quote

__all__ = [
    "ACK",
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "FRAME_HEADER",
    "GOAWAY",
    "GRPC_DEADLINE_EXCEEDED",
    "GRPC_INTERNAL",
    "GRPC_INVALID_ARGUMENT",
    "GRPC_OK",
    "GRPC_RESOURCE_EXHAUSTED",
    "GRPC_UNIMPLEMENTED",
    "HEADERS",
    "PADDED",
    "PING",
    "PREFACE",
    "PRIORITY",
    "PRIORITY_FLAG",
    "PUSH_PROMISE",
    "RESPONSE_HEADERS",
    "RST_STREAM",
    "SETTINGS",
    "STATUS_415",
    "WINDOW_UPDATE",
    "ErrorCode",
    "frame",
    "goaway",
    "rst_stream",
    "settings",
    "trailers",
    "window_update",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20


class ErrorCode:
    NO_ERROR = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2
    FLOW_CONTROL_ERROR = 3
    SETTINGS_TIMEOUT = 4
    STREAM_CLOSED = 5
    FRAME_SIZE_ERROR = 6
    REFUSED_STREAM = 7
    CANCEL = 8
    COMPRESSION_ERROR = 9
    ENHANCE_YOUR_CALM = 11


FRAME_HEADER = struct.Struct(">BHBBI")
"""The 9-byte frame header: length (24 bits as 8 + 16), type, flags, R bit + stream id."""

# gRPC status codes (grpc/status.h) the engine answers with in trailers.
GRPC_OK = 0
GRPC_INVALID_ARGUMENT = 3
GRPC_DEADLINE_EXCEEDED = 4
GRPC_RESOURCE_EXHAUSTED = 8
GRPC_UNIMPLEMENTED = 12
GRPC_INTERNAL = 13


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: 9-byte header + payload (the caller keeps payloads within the peer's frame size)."""
    n = len(payload)
    return FRAME_HEADER.pack(n >> 16, n & 0xFFFF, kind, flags, stream_id) + payload


def settings(values: dict[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v) for k, v in values.items()))


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", increment))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, struct.pack(">I", code))


def goaway(last_stream_id: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream_id, code) + debug)


def _length(n: int) -> bytes:
    """HPACK integer with a 7-bit prefix (Huffman bit clear)."""
    if n < 127:
        return bytes([n])
    out = bytearray([127])
    n -= 127
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    """Literal header field without indexing, new name (RFC 7541 section 6.2.2)."""
    return b"\x00" + _length(len(name)) + name + _length(len(value)) + value


RESPONSE_HEADERS = b"\x88" + _literal(b"content-type", b"application/grpc")
"""``:status: 200`` (static table index 8) and ``content-type: application/grpc``."""

STATUS_415 = b"\x08\x03415"
"""``:status: 415`` (literal without indexing, name from static index 8): a request that is not gRPC."""


def trailers(status: int, message: str = "") -> bytes:
    """The header block of gRPC trailers: ``grpc-status`` and, when given, ``grpc-message``."""
    if status == GRPC_OK and not message:
        return OK_TRAILERS  # every answered stream: built once
    block = _literal(b"grpc-status", str(status).encode())
    if message:
        block += _literal(b"grpc-message", quote(message, safe=" !#$&'()*+,/:;=?@[]~").encode())
    return block


OK_TRAILERS = _literal(b"grpc-status", b"0")
"""The trailers of a stream that ends OK without a message (what :func:`trailers` returns for it)."""
