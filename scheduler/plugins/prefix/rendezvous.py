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

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from functools import lru_cache
from hashlib import blake2b

__all__ = ["Placements", "address_hash", "rank", "weight"]

_MASK = (1 << 64) - 1


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
    """First-block hash -> the endpoint a new prefix was placed on, LRU-bounded to ``max_entries``, with
    the number of prefixes each endpoint holds (the "load" of consistent hashing with bounded loads)."""

    __slots__ = ("_entries", "counts", "max_entries")

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[int, str] = OrderedDict()
        self.counts: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: int) -> str | None:
        return self._entries.get(key)

    def record(self, key: int, address: str) -> None:
        """``key`` is placed on ``address`` (most recently used); the least recent beyond the bound go."""
        old = self._entries.get(key)
        if old != address:
            if old is not None:
                self._uncount(old)
            self.counts[address] = self.counts.get(address, 0) + 1
            self._entries[key] = address
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._uncount(self._entries.popitem(last=False)[1])

    def remove(self, addresses: Iterable[str]) -> None:
        """Forget the placements on endpoints that left the pool."""
        gone = set(addresses)
        for key in [k for k, a in self._entries.items() if a in gone]:
            del self._entries[key]
        for address in gone:
            self.counts.pop(address, None)

    def _uncount(self, address: str) -> None:
        left = self.counts.get(address, 0) - 1
        if left > 0:
            self.counts[address] = left
        else:
            self.counts.pop(address, None)
