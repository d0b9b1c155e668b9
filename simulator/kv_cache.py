"""The KV block cache of one simulated server (sans-I/O, no clock).

Contract, following vLLM's prefix caching:

* A prompt's *full* blocks of ``block_size`` tokens get chained hashes: ``h[i] = xxh64(h[i-1] || ids)``,
  the chain rooted in the LoRA adapter name, so the same text under two adapters never shares blocks.
* :meth:`KVCache.allocate` takes a request's chain plus ``extra`` anonymous blocks (the partial last
  prompt block and the decode tokens). Leading chain blocks already present are *hits* (the first miss
  ends the prefix); cached tokens = hits x block_size. Hits and new blocks are ref-counted.
* :meth:`KVCache.release` drops the references. A hashed block whose count reaches zero stays cached but
  becomes *evictable*; anonymous blocks are freed. Released chains enter the LRU tail-first, so a chain's
  tail is evicted before its head.
* Allocation needs ``new blocks <= never-used blocks + evictable blocks`` (evictable hits excluded);
  otherwise it returns None and changes nothing (the request waits). Evictions take the least recently
  used evictable block first.
* ``usage`` = blocks referenced by running requests / total, the value of ``vllm:kv_cache_usage_perc``.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence

import xxhash

__all__ = ["KVCache", "block_hashes"]


def block_hashes(token_ids: Sequence[int], block_size: int, lora: str | None = None) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids`` (a partial last block is not hashed)."""
    n_full = len(token_ids) // block_size
    if n_full == 0:
        return []
    ids = array("q", token_ids[: n_full * block_size]).tobytes()
    step = block_size * 8
    parent = xxhash.xxh64_intdigest(lora.encode() if lora else b"")
    out: list[int] = []
    h = xxhash.xxh64_intdigest
    for i in range(n_full):
        parent = h(parent.to_bytes(8, "little") + ids[i * step : (i + 1) * step])
        out.append(parent)
    return out


class KVCache:
    """Ref-counted block pool with LRU eviction of unreferenced cached blocks."""

    __slots__ = ("_anon", "_evictable", "_refs", "_used_hashed", "block_size", "evictions", "total")

    def __init__(self, total_blocks: int, block_size: int) -> None:
        self.total = total_blocks
        self.block_size = block_size
        self._refs: dict[int, int] = {}  # hashed blocks present in the cache -> reference count
        self._evictable: OrderedDict[int, None] = OrderedDict()  # refcount-0 hashed blocks, LRU first
        self._used_hashed = 0  # hashed blocks with refcount > 0
        self._anon = 0  # anonymous blocks in use
        self.evictions = 0

    @property
    def used_blocks(self) -> int:
        return self._used_hashed + self._anon

    @property
    def cached_blocks(self) -> int:
        """Hashed blocks present (referenced or evictable)."""
        return len(self._refs)

    @property
    def free_blocks(self) -> int:
        """Blocks an allocation could obtain: never-used plus evictable."""
        return self.total - self.used_blocks

    @property
    def usage(self) -> float:
        return self.used_blocks / self.total

    def contains(self, block_hash: int) -> bool:
        return block_hash in self._refs

    def prefix_hits(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks of ``hashes`` present in the cache (no state change)."""
        refs = self._refs
        n = 0
        for bh in hashes:
            if bh not in refs:
                break
            n += 1
        return n

    def can_allocate(self, hashes: Sequence[int], extra: int) -> bool:
        hits = self.prefix_hits(hashes)
        idle_hits = sum(1 for bh in hashes[:hits] if self._refs[bh] == 0)
        needed = len(hashes) - hits + extra
        return needed <= self.free_blocks - idle_hits

    def allocate(self, hashes: Sequence[int], extra: int) -> int | None:
        """Reference the chain and ``extra`` anonymous blocks; return the hit count or None if full."""
        if not self.can_allocate(hashes, extra):
            return None
        refs, evictable = self._refs, self._evictable
        hits = self.prefix_hits(hashes)
        for bh in hashes[:hits]:
            count = refs[bh]
            if count == 0:
                del evictable[bh]
                self._used_hashed += 1
            refs[bh] = count + 1
        for bh in hashes[hits:]:
            if bh in refs:  # a later block may exist even though an earlier one missed
                count = refs[bh]
                if count == 0:
                    del evictable[bh]
                    self._used_hashed += 1
                refs[bh] = count + 1
                continue
            self._make_room(1)
            refs[bh] = 1
            self._used_hashed += 1
        self._make_room(extra)
        self._anon += extra
        return hits

    def release(self, hashes: Sequence[int], extra: int) -> None:
        """Drop one reference to each block of the chain and free ``extra`` anonymous blocks."""
        refs, evictable = self._refs, self._evictable
        for bh in reversed(hashes):
            count = refs[bh] - 1
            refs[bh] = count
            if count == 0:
                self._used_hashed -= 1
                evictable[bh] = None
        self._anon -= extra

    def _make_room(self, n: int) -> None:
        never_used = self.total - self.used_blocks - len(self._evictable)
        while never_used < n:
            victim, _ = self._evictable.popitem(last=False)
            del self._refs[victim]
            self.evictions += 1
            never_used += 1

    def clear(self) -> None:
        """Drop every evictable block (``AllBlocksCleared``)."""
        for bh in self._evictable:
            del self._refs[bh]
        self._evictable.clear()
