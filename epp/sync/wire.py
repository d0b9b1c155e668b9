"""The replica-sync datagram: encoding, HMAC-SHA256 authentication and replay protection.

Layout (network byte order)::

    header   magic "PYRS" (4) | version 1 (u8) | kind (u8) | sender (u64) | seq (u64) | time_ms (u64)
    payload  kind 1, OWNERS: plugin (u8 length + UTF-8) | claims (u16) | per claim:
                 address (u8 length + UTF-8) | key (u64) | placement (u32) | anchors (u8) |
                 per anchor: hash (u64) | created (u8: 0 or 1)
             kind 2, LOADS:  plugin (u8 length + UTF-8) | generation (u32) | entries (u16) | per entry:
                 address (u8 length + UTF-8) | in flight (u32)
    mac      HMAC-SHA256(key, header + payload) (32)

``sender`` is a random 64-bit id drawn when the process starts (a restarted replica is a new sender),
``seq`` counts that sender's datagrams from 1, ``time_ms`` is its wall clock (Unix milliseconds).
A receiver (:class:`ReplayGuard`) accepts a datagram only once its MAC verifies, its time is within
``window`` seconds of the receiver's clock, and its ``seq`` is new for that sender (above the highest
seen, or one of the 64 below it not seen yet: datagrams may be reordered, never accepted twice). At
most ``max_senders`` senders are tracked; a new one is refused while all are live (a tracked sender
is dropped only after ``window`` seconds of silence, when its replays are stale anyway).

Every decoder checks lengths and counts against the datagram's size and raises :class:`WireError`
naming the reason; nothing in a datagram is trusted before the MAC verifies.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from scheduler.replica_sync import MAX_ANCHORS, OwnershipClaim

__all__ = [
    "HEADER",
    "KIND_LOADS",
    "KIND_OWNERS",
    "MAC_BYTES",
    "MAX_DATAGRAM",
    "MIN_KEY_BYTES",
    "Datagram",
    "ReplayGuard",
    "WireError",
    "decode",
    "encode_loads",
    "encode_owners",
    "seal",
]

MAGIC = b"PYRS"
VERSION = 1
KIND_OWNERS = 1
KIND_LOADS = 2
HEADER = struct.Struct("!4sBBQQQ")
MAC_BYTES = 32
MAX_DATAGRAM = 1400
"""The largest datagram sent or accepted (bytes): one Ethernet frame, so no IP fragmentation."""
MIN_KEY_BYTES = 16

_U8, _U16, _U32, _U64 = struct.Struct("!B"), struct.Struct("!H"), struct.Struct("!I"), struct.Struct("!Q")
_CLAIM = struct.Struct("!QIB")  # key, placement, anchors
_ANCHOR = struct.Struct("!QB")
_MAX_U64 = (1 << 64) - 1
_MAX_U32 = (1 << 32) - 1


class WireError(ValueError):
    """A datagram that is not a valid replica-sync datagram; ``reason`` is a metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Datagram:
    kind: int
    sender: int
    seq: int
    time_ms: int
    plugin: str
    claims: tuple[OwnershipClaim, ...] = ()
    generation: int = 0
    loads: tuple[tuple[str, int], ...] = ()


def _text(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raise ValueError(f"{value[:40]!r}...: longer than 255 bytes")
    return _U8.pack(len(raw)) + raw


def seal(key: bytes, kind: int, sender: int, seq: int, time_ms: int, payload: bytes) -> bytes:
    """Header + payload + MAC."""
    body = HEADER.pack(MAGIC, VERSION, kind, sender, seq, time_ms) + payload
    return body + hmac.new(key, body, hashlib.sha256).digest()


def claim_bytes(claim: OwnershipClaim) -> bytes | None:
    """One claim's encoding, or None when it cannot be sent (a hash outside 64 bits, too many anchors,
    an address over 255 bytes)."""
    if not 0 <= claim.key <= _MAX_U64 or not 0 <= claim.placement <= _MAX_U32:
        return None
    if len(claim.anchors) > MAX_ANCHORS or any(not 0 <= h <= _MAX_U64 for h, _ in claim.anchors):
        return None
    try:
        address = _text(claim.address)
    except ValueError:
        return None
    return (
        address
        + _CLAIM.pack(claim.key, claim.placement, len(claim.anchors))
        + b"".join(_ANCHOR.pack(h, 1 if created else 0) for h, created in claim.anchors)
    )


def _room(plugin: bytes) -> int:
    return MAX_DATAGRAM - HEADER.size - MAC_BYTES - len(plugin) - 2


def encode_owners(plugin: str, claims: Sequence[bytes]) -> Iterator[bytes]:
    """OWNERS payloads holding the encoded ``claims`` (from :func:`claim_bytes`), as few as fit."""
    name = _text(plugin)
    room = _room(name)
    batch: list[bytes] = []
    used = 0
    for claim in claims:
        if len(claim) > room:
            continue  # cannot happen with MAX_ANCHORS and 255-byte addresses; never sent if it did
        if used + len(claim) > room:
            yield name + _U16.pack(len(batch)) + b"".join(batch)
            batch, used = [], 0
        batch.append(claim)
        used += len(claim)
    if batch:
        yield name + _U16.pack(len(batch)) + b"".join(batch)


def encode_loads(plugin: str, generation: int, counts: Mapping[str, int]) -> Iterator[bytes]:
    """LOADS payloads of one ``generation`` holding ``counts`` (several when they do not fit one)."""
    name = _text(plugin)
    room = _room(name) - 4
    head = name + _U32.pack(generation & _MAX_U32)
    batch: list[bytes] = []
    used = 0
    for address, count in counts.items():
        try:
            entry = _text(address) + _U32.pack(min(max(count, 0), _MAX_U32))
        except ValueError:
            continue
        if used + len(entry) > room:
            yield head + _U16.pack(len(batch)) + b"".join(batch)
            batch, used = [], 0
        batch.append(entry)
        used += len(entry)
    yield head + _U16.pack(len(batch)) + b"".join(batch)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise WireError("format", "truncated")
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        return s.unpack(self.take(s.size))

    def text(self) -> str:
        (n,) = self.unpack(_U8)
        try:
            return self.take(n).decode()
        except UnicodeDecodeError:
            raise WireError("format", "text is not UTF-8") from None


def verify(key: bytes, data: bytes) -> None:
    """Raise WireError unless ``data`` is a datagram of this version sealed with ``key``."""
    if not HEADER.size + MAC_BYTES <= len(data) <= MAX_DATAGRAM:
        raise WireError("size", f"{len(data)} bytes")
    if data[:4] != MAGIC or data[4] != VERSION:
        raise WireError("format", "not a replica-sync datagram of version 1")
    body, mac = data[:-MAC_BYTES], data[-MAC_BYTES:]
    if not hmac.compare_digest(hmac.new(key, body, hashlib.sha256).digest(), mac):
        raise WireError("auth", "the MAC does not verify")


def decode(data: bytes) -> Datagram:
    """The datagram's fields (after :func:`verify`); raises WireError on any malformed field."""
    _magic, _version, kind, sender, seq, time_ms = HEADER.unpack_from(data)
    r = _Reader(data[:-MAC_BYTES], HEADER.size)
    plugin = r.text()
    if kind == KIND_OWNERS:
        (n,) = r.unpack(_U16)
        claims = []
        for _ in range(n):
            address = r.text()
            key, placement, anchors = r.unpack(_CLAIM)
            if anchors > MAX_ANCHORS:
                raise WireError("format", f"{anchors} anchors in a claim (at most {MAX_ANCHORS})")
            pairs = []
            for _ in range(anchors):
                h, created = r.unpack(_ANCHOR)
                if created > 1:
                    raise WireError("format", "an anchor's created flag is not 0 or 1")
                pairs.append((h, created == 1))
            claims.append(OwnershipClaim(address, key, tuple(pairs), placement))
        out = Datagram(kind, sender, seq, time_ms, plugin, claims=tuple(claims))
    elif kind == KIND_LOADS:
        (generation,) = r.unpack(_U32)
        (n,) = r.unpack(_U16)
        loads = []
        for _ in range(n):
            address = r.text()
            (count,) = r.unpack(_U32)
            loads.append((address, count))
        out = Datagram(kind, sender, seq, time_ms, plugin, generation=generation, loads=tuple(loads))
    else:
        raise WireError("format", f"unknown kind {kind}")
    if r.pos != len(r.data):
        raise WireError("format", f"{len(r.data) - r.pos} bytes after the payload")
    return out


class ReplayGuard:
    """Accepts each (sender, seq) once, within ``window`` seconds of the receiver's clock (see the
    module docstring). Memory: ``max_senders`` entries of three ints."""

    __slots__ = ("_senders", "max_senders", "window")

    def __init__(self, window: float = 5.0, max_senders: int = 64) -> None:
        self.window = window
        self.max_senders = max_senders
        self._senders: dict[int, tuple[int, int, float]] = {}  # sender -> (highest seq, bitmap, seen at)

    def __len__(self) -> int:
        return len(self._senders)

    def check(self, sender: int, seq: int, time_ms: int, now: float) -> None:
        """Raise WireError("stale" | "replay" | "peers") or record the datagram as seen."""
        if abs(time_ms / 1000.0 - now) > self.window:
            raise WireError("stale", f"sent {time_ms / 1000.0 - now:+.1f}s from now")
        senders = self._senders
        state = senders.get(sender)
        if state is None:
            if len(senders) >= self.max_senders:
                oldest = min(senders, key=lambda s: senders[s][2])
                if now - senders[oldest][2] <= self.window:
                    raise WireError("peers", f"already {len(senders)} live senders")
                del senders[oldest]
            senders[sender] = (seq, 0, now)
            return
        highest, seen, _at = state
        if seq > highest:
            shift = seq - highest
            seen = ((seen << shift) | (1 << (shift - 1))) & 0xFFFFFFFFFFFFFFFF if shift <= 64 else 0
            senders[sender] = (seq, seen, now)
            return
        back = highest - seq
        if back == 0 or back > 64 or seen & (1 << (back - 1)):
            raise WireError("replay", f"sequence {seq} of sender {sender:x} already seen or too old")
        senders[sender] = (highest, seen | (1 << (back - 1)), now)
