"""Reading request header blocks: the HPACK decoder state, and the three headers the engine needs.

Every header block of a connection is decoded (RFC 9113 section 4.3: the decoder state must follow all of
them, also those of streams that are refused or already closed) with the ``hpack`` package, bounded by
``max_header_list_size`` (decoded size, RFC 7541 accounting) and by the dynamic table we advertise (4096
bytes, the default). What the engine reads from a request's headers:

* ``:path``: anything but ``/envoy.service.ext_proc.v3.ExternalProcessor/Process`` is answered
  UNIMPLEMENTED;
* ``content-type``: not ``application/grpc`` (or ``application/grpc+...``/``;...``) is answered HTTP 415,
  as the gRPC HTTP/2 protocol says;
* ``grpc-timeout``: the stream's deadline in seconds (``None`` when absent).

Cost: Envoy's gRPC client repeats the same headers on every stream, which HPACK turns into a block of
one-byte indexed fields after the first stream. Such a block changes no decoder state, so its reading is
remembered by the block's bytes (at most 64 blocks, forgotten whenever another kind of block changes the
dynamic table): a dictionary look-up instead of a decode (about 26 µs).
"""

from __future__ import annotations

from dataclasses import dataclass

import hpack
from hpack.exceptions import HPACKError

__all__ = ["HeaderError", "RequestHead", "RequestHeaders", "parse_grpc_timeout"]

PROCESS_PATH = b"/envoy.service.ext_proc.v3.ExternalProcessor/Process"
_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_CACHE_SIZE = 64
_GRPC_SUBTYPES = (b"application/grpc+", b"application/grpc;")


class HeaderError(Exception):
    """A header block that cannot be decoded or is too large (a connection error: the decoder state is
    lost)."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What the engine needs of a request's headers."""

    path_ok: bool  # :path is the ext_proc Process method
    grpc_content: bool  # content-type is application/grpc[+proto|;...]
    timeout: float | None  # grpc-timeout in seconds; None: no deadline (or an unreadable value)


def parse_grpc_timeout(value: bytes) -> float | None:
    """``grpc-timeout``: 1-8 ASCII digits and a unit ``H M S m u n``; None for anything else."""
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit():
        return None
    unit = _UNITS.get(chr(value[-1]))
    return None if unit is None else int(value[:-1]) * unit


def _head(headers: list[tuple[bytes, bytes]]) -> RequestHead:
    path_ok, grpc_content, timeout = False, False, None
    for name, value in headers:
        if name == b":path":
            path_ok = value == PROCESS_PATH
        elif name == b"content-type":
            grpc_content = value == b"application/grpc" or value[:17] in _GRPC_SUBTYPES
        elif name == b"grpc-timeout":
            timeout = parse_grpc_timeout(value)
    return RequestHead(path_ok, grpc_content, timeout)


class RequestHeaders:
    """One connection's HPACK decoder; :meth:`read` decodes a complete header block."""

    __slots__ = ("_cache", "_decoder")

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._cache: dict[bytes, RequestHead] = {}

    def read(self, block: bytes) -> RequestHead:
        """The block's :class:`RequestHead`; raises :class:`HeaderError` (a connection error)."""
        head = self._cache.get(block)
        if head is not None:
            return head
        try:
            headers = self._decoder.decode(block, raw=True)
        except HPACKError as exc:
            raise HeaderError(f"header block: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # hpack's errors for malformed input are not all HPACKError
            raise HeaderError(f"header block: {type(exc).__name__}") from None
        head = _head(headers)  # type: ignore[arg-type]  # raw=True: bytes pairs
        # Only one-byte indexed fields (0x80-0xFE each): the dynamic table is unchanged by this block.
        if block and b"\xff" not in block and min(block) >= 0x80:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[block] = head
        else:
            self._cache.clear()  # the table may have changed: indices now mean other fields
        return head
