"""Deterministic embedding vectors: a unit vector derived from the token ids by hashing.

Component ``j`` of the raw vector is ``sum_t (xxh32(t, seed=j) / 2^32 - 0.5)`` over the first 512 token
ids ``t``; the result is L2-normalised (all zeros stay zeros for an empty input). Same ids, same vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import xxhash

__all__ = ["embedding_vector"]


def embedding_vector(token_ids: Sequence[int], dims: int) -> list[float]:
    h = xxhash.xxh32_intdigest
    raw = [0.0] * dims
    for t in token_ids[:512]:
        key = t.to_bytes(8, "little", signed=True)
        for j in range(dims):
            raw[j] += h(key, seed=j) / 4294967296.0 - 0.5
    norm = math.sqrt(sum(v * v for v in raw))
    return [v / norm for v in raw] if norm > 0 else raw
