"""Reading request header blocks: the HPACK decoder state, and the three headers the engine needs.

Every header block of a connection is decoded (RFC 9113 section 4.3: the decoder state must follow all of
them, also those of streams that are refused or already closed) with the ``hpack`` package, bounded by
``max_header_list_size`` (decoded size, RFC 7541 accounting) and by the dynamic table we advertise (4096
bytes, the default). What the engine reads from a request's headers:

* ``:path``: anything but ``/envoy.service.ext_proc.v3.ExternalProcessor/Process`` is answered
  UNIMPLEMENTED, unless it is a ``grpc.health.v1.Health`` method and the engine serves health
  (``--health-checking``; :data:`HEALTH_METHODS`);
* ``content-type``: not ``application/grpc`` (or ``application/grpc+...``/``;...``) is answered HTTP 415,
  as the gRPC HTTP/2 protocol says;
* ``grpc-timeout``: the stream's deadline in seconds (``None`` when absent).

Cost: Envoy's gRPC client repeats the same headers on every stream, which HPACK turns into the same block
after the first stream (indexed fields, and ``:path`` as a literal without indexing). A block of indexed
fields and literals without indexing / never indexed changes no decoder state, so its reading is remembered
by the block's bytes (at most 64 blocks, all forgotten whenever a block changes the dynamic table): a
dictionary look-up instead of a decode (about 40 µs with the ``hpack`` package).
"""

from __future__ import annotations

from dataclasses import dataclass

import hpack
from hpack.exceptions import HPACKError

__all__ = ["HEALTH_METHODS", "HeaderError", "RequestHead", "RequestHeaders", "head_of", "parse_grpc_timeout"]

PROCESS_PATH = b"/envoy.service.ext_proc.v3.ExternalProcessor/Process"
CHECK, WATCH, LIST = 1, 2, 3
HEALTH_METHODS = {
    b"/grpc.health.v1.Health/Check": CHECK,
    b"/grpc.health.v1.Health/Watch": WATCH,
    b"/grpc.health.v1.Health/List": LIST,
}
"""``:path`` of the grpc.health.v1 methods -> :attr:`RequestHead.health` (0: not a health method)."""
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
    health: int = 0  # a grpc.health.v1 method (CHECK, WATCH, LIST); 0: another path


def parse_grpc_timeout(value: bytes) -> float | None:
    """``grpc-timeout``: 1-8 ASCII digits and a unit ``H M S m u n``; None for anything else."""
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit():
        return None
    unit = _UNITS.get(chr(value[-1]))
    return None if unit is None else int(value[:-1]) * unit


def head_of(headers: list[tuple[bytes, bytes]]) -> RequestHead:
    """What the engine needs of decoded request headers (also the ngh2 engine's, which ngh2 decodes)."""
    path_ok, grpc_content, timeout, health = False, False, None, 0
    for name, value in headers:
        if name == b":path":
            path_ok = value == PROCESS_PATH
            health = 0 if path_ok else HEALTH_METHODS.get(value, 0)
        elif name == b"content-type":
            grpc_content = value == b"application/grpc" or value[:17] in _GRPC_SUBTYPES
        elif name == b"grpc-timeout":
            timeout = parse_grpc_timeout(value)
    return RequestHead(path_ok, grpc_content, timeout, health)


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
        head = head_of(headers)  # type: ignore[arg-type]  # raw=True: bytes pairs
        if _keeps_table(block):
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[block] = head
        else:
            self._cache.clear()  # the table changed: indices now mean other fields
        return head


def _integer(block: bytes, pos: int, mask: int) -> tuple[int, int]:
    """An HPACK integer (RFC 7541 5.1) whose prefix is ``block[pos] & mask``: (value, next position)."""
    value = block[pos] & mask
    pos += 1
    if value == mask:
        shift = 0
        while True:
            byte = block[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
    return value, pos


def _keeps_table(block: bytes) -> bool:
    """True when the (already decoded, hence well-formed) block only has indexed fields and literals
    without indexing or never indexed: it leaves the dynamic table as it was."""
    pos, end = 0, len(block)
    while pos < end:
        first = block[pos]
        if first & 0x80:  # indexed field
            _, pos = _integer(block, pos, 0x7F)
        elif first & 0xE0 in (0x00, 0x10):  # literal without indexing / never indexed
            index, pos = _integer(block, pos, 0x0F)
            for _ in range(1 if index else 2):  # the value, after a literal name when index is 0
                length, pos = _integer(block, pos, 0x7F)
                pos += length
        else:  # incremental indexing (0x40) or a table size update (0x20)
            return False
    return True
