"""Rendezvous (highest-random-weight) ranking of endpoints for a prefix, identical on every replica.

``weight(key, e) = mix64(key XOR A(e))`` where ``A(e)`` is BLAKE2b with an 8-byte digest of the
endpoint's address (UTF-8, read little-endian) and ``mix64`` is one SplitMix64 step (add
0x9E3779B97F4A7C15, then its 64-bit finalizer); ``key`` is a
prefix's block hash taken modulo 2^64. Nothing depends on Python's per-process ``hash()`` seed, on
process state or on the order the endpoints are given in, so two picker replicas that see the same
candidates rank them the same way without talking to each other. Adding or removing an endpoint moves
only the prefixes whose top-ranked endpoint it is (rendezvous hashing's minimal disruption).

:class:`Placements` remembers which endpoint each new prefix was placed on, so that placement can bound
the number of prefixes per endpoint (consistent hashing with bounded loads, the load being prefixes).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import lru_cache
from hashlib import blake2b

__all__ = ["PLACEMENT_BYTES", "Placements", "address_hash", "rank", "weight"]

_MASK = (1 << 64) - 1

PLACEMENT_BYTES = 200
"""Upper bound of the memory one placement costs (measured ~195 B: key, ordered-dict link, a tuple of
address, weight and last-use time)."""


@lru_cache(maxsize=4096)
def address_hash(address: str) -> int:
    """The stable 64-bit hash of an endpoint address (bounded cache: 4,096 addresses)."""
    return int.from_bytes(blake2b(address.encode(), digest_size=8).digest(), "little")


def weight(key: int, address: str) -> int:
    """The rendezvous weight of ``address`` for the prefix ``key`` (64-bit unsigned)."""
    z = ((key & _MASK) ^ address_hash(address)) + 0x9E3779B97F4A7C15 & _MASK
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK
    return z ^ (z >> 31)


def rank(key: int, addresses: Sequence[str]) -> list[int]:
    """Indexes of ``addresses``, highest weight first (ties, 2^-64 likely, broken by address)."""
    return sorted(
        range(len(addresses)), key=lambda i: (weight(key, addresses[i]), addresses[i]), reverse=True
    )


class Placements:
    """First-block hash -> the endpoint a new prefix was placed on, with the *footprint* each endpoint
    holds (the "load" of consistent hashing with bounded loads): the sum of the weights of the prefixes
    placed on it, 1 per prefix for ``hash`` placement, the prompt's blocks for ``balanced``.

    Bounded two ways: at most ``max_entries`` entries (least recently used dropped first; a placement is
    used when it is recorded and each time a later request of the prefix is dispatched, :meth:`touch`),
    and an entry unused for more than ``window`` seconds is dropped by :meth:`expire`, so prefixes that
    stopped arriving stop counting toward their endpoint's footprint."""

    __slots__ = ("_entries", "counts", "max_entries", "total", "window")

    def __init__(self, max_entries: int, window: float = math.inf) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        if not window > 0:
            raise ValueError(f"window must be > 0, got {window}")
        self.max_entries = max_entries
        self.window = window
        self._entries: OrderedDict[int, tuple[str, int, float]] = OrderedDict()  # address, weight, used
        self.counts: dict[str, int] = {}
        self.total = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: int) -> str | None:
        entry = self._entries.get(key)
        return entry[0] if entry is not None else None

    def record(self, key: int, address: str, weight: int = 1, now: float = 0.0) -> None:
        """``key`` is placed on ``address`` with ``weight`` (most recently used); the least recent beyond
        the bound go."""
        old = self._entries.get(key)
        if old is not None:
            self._uncount(old[0], old[1])
        self.counts[address] = self.counts.get(address, 0) + weight
        self.total += weight
        self._entries[key] = (address, weight, now)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            address_, weight_, _ = self._entries.popitem(last=False)[1]
            self._uncount(address_, weight_)

    def touch(self, key: int, now: float) -> None:
        """A later request of the placed prefix ``key`` was dispatched: it is used now."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries[key] = (entry[0], entry[1], now)
            self._entries.move_to_end(key)

    def expire(self, now: float) -> None:
        """Drop the placements unused for more than ``window`` seconds (the oldest are first)."""
        entries = self._entries
        while entries:
            key = next(iter(entries))
            address, weight, used = entries[key]
            if now - used <= self.window:
                break
            del entries[key]
            self._uncount(address, weight)

    def remove(self, addresses: Iterable[str]) -> None:
        """Forget the placements on endpoints that left the pool."""
        gone = set(addresses)
        for key in [k for k, entry in self._entries.items() if entry[0] in gone]:
            del self._entries[key]
        for address in gone:
            self.total -= self.counts.pop(address, 0)

    def _uncount(self, address: str, weight: int) -> None:
        self.total -= weight
        left = self.counts.get(address, 0) - weight
        if left > 0:
            self.counts[address] = left
        else:
            self.counts.pop(address, None)
