"""gRPC length-prefixed message framing, as a gRPC body crosses ext_proc (used by the gRPC parsers).

A frame is a 1-byte compressed flag, a 4-byte big-endian message length and the message. Compressed
frames are refused (as upstream does). :func:`first_message` is for request bodies (the unary or
first streamed message); :func:`messages` walks every complete frame of a response body.
"""

from __future__ import annotations

from collections.abc import Iterator

from epp.request.errors import InvalidRequestError

__all__ = ["HEADER_LEN", "first_message", "frame", "messages"]

HEADER_LEN = 5


def first_message(data: bytes) -> bytes:
    """The payload of the first frame; InvalidRequestError (400) for a short, compressed or
    truncated frame."""
    if len(data) < HEADER_LEN:
        raise InvalidRequestError(
            f"invalid gRPC frame: expected at least {HEADER_LEN} bytes for header, got {len(data)}"
        )
    if data[0] == 1:
        raise InvalidRequestError("compressed gRPC payload is not supported")
    length = int.from_bytes(data[1:5], "big")
    if len(data) < HEADER_LEN + length:
        raise InvalidRequestError(
            f"incomplete gRPC payload: header indicates {length} bytes, "
            f"but only {len(data) - HEADER_LEN} bytes are available"
        )
    return data[HEADER_LEN : HEADER_LEN + length]


def messages(data: bytes) -> Iterator[bytes]:
    """Payloads of the complete uncompressed frames of ``data``, in order (stops at the first bad one)."""
    offset = 0
    while len(data) - offset >= HEADER_LEN:
        if data[offset] not in (0, 1):
            return
        length = int.from_bytes(data[offset + 1 : offset + 5], "big")
        end = offset + HEADER_LEN + length
        if end > len(data):
            return
        if data[offset] == 0:
            yield data[offset + HEADER_LEN : end]
        offset = end


def frame(message: bytes) -> bytes:
    """``message`` as one uncompressed gRPC frame."""
    return b"\x00" + len(message).to_bytes(4, "big") + message
