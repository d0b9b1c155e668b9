"""Rendezvous (highest-random-weight) ranking of endpoints for a prefix, identical on every replica.

``weight(key, e) = mix64(key XOR A(e))`` where ``A(e)`` is BLAKE2b with an 8-byte digest of the
endpoint's address (UTF-8, read little-endian) and ``mix64`` is one SplitMix64 step (add
0x9E3779B97F4A7C15, then its 64-bit finalizer); ``key`` is a
prefix's block hash taken modulo 2^64. Nothing depends on Python's per-process ``hash()`` seed, on
process state or on the order the endpoints are given in, so two picker replicas that see the same
candidates rank them the same way without talking to each other. Adding or removing an endpoint moves
only the prefixes whose top-ranked endpoint it is (rendezvous hashing's minimal disruption).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from hashlib import blake2b

__all__ = ["address_hash", "rank", "weight"]

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
