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
* Optionally it records ``BlockStored``/``BlockRemoved``/``AllBlocksCleared`` events (vLLM's KV events).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Sequence

import xxhash

from simulator.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["KVCache", "VllmBlockHasher", "block_hashes"]


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


class VllmBlockHasher:
    """vLLM's block hashes (``--prefix-caching-hash-algo``, root seeded by ``$PYTHONHASHSEED`` or vLLM's
    default seed), as the 64-bit ints vLLM publishes in KV events (the digest's last 8 bytes). LoRA
    requests carry the adapter name as the block's extra key, as vLLM's do."""

    def __init__(self, algorithm: str, seed: str, block_size: int) -> None:
        from scheduler.plugins.precise.hashing import BlockKeyer

        self._keyer = BlockKeyer(algorithm, seed, block_size)

    def __call__(self, token_ids: Sequence[int], block_size: int, lora: str | None = None) -> list[int]:
        return [int.from_bytes(d[-8:], "big") for d in self._keyer.digests(token_ids, lora)]


class KVCache:
    """Ref-counted block pool with LRU eviction of unreferenced cached blocks.

    With ``record_events=True`` every change of the set of cached blocks is appended to ``events``
    (:mod:`simulator.kv_events` values) for the caller to drain: runs of newly stored blocks with their
    tokens and parent, evicted blocks, and clears.
    """

    __slots__ = ("_anon", "_evictable", "_refs", "_used_hashed", "block_size", "events", "evictions", "total")

    def __init__(self, total_blocks: int, block_size: int, record_events: bool = False) -> None:
        self.total = total_blocks
        self.block_size = block_size
        self._refs: dict[int, int] = {}  # hashed blocks present in the cache -> reference count
        self._evictable: OrderedDict[int, None] = OrderedDict()  # refcount-0 hashed blocks, LRU first
        self._used_hashed = 0  # hashed blocks with refcount > 0
        self._anon = 0  # anonymous blocks in use
        self.evictions = 0
        self.events: list[KVEvent] | None = [] if record_events else None

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

    def _ref(self, bh: int) -> None:
        count = self._refs[bh]
        if count == 0:
            del self._evictable[bh]
            self._used_hashed += 1
        self._refs[bh] = count + 1

    def allocate(
        self,
        hashes: Sequence[int],
        extra: int,
        token_ids: Sequence[int] = (),
        lora: str | None = None,
    ) -> int | None:
        """Reference the chain and ``extra`` anonymous blocks; return the hit count or None if full.

        ``token_ids`` (the prompt) and ``lora`` only feed ``BlockStored`` events.
        """
        if not self.can_allocate(hashes, extra):
            return None
        refs = self._refs
        hits = self.prefix_hits(hashes)
        for bh in hashes[:hits]:
            self._ref(bh)
        run_start = -1  # first index of the current run of newly stored blocks
        for i in range(hits, len(hashes)):
            bh = hashes[i]
            if bh in refs:  # a later block may exist even though an earlier one missed
                self._ref(bh)
                self._stored(hashes, run_start, i, token_ids, lora)
                run_start = -1
                continue
            self._make_room(1)
            refs[bh] = 1
            self._used_hashed += 1
            if run_start < 0:
                run_start = i
        self._stored(hashes, run_start, len(hashes), token_ids, lora)
        self._make_room(extra)
        self._anon += extra
        return hits

    def _stored(
        self, hashes: Sequence[int], start: int, end: int, ids: Sequence[int], lora: str | None
    ) -> None:
        if self.events is None or start < 0 or start >= end:
            return
        bs = self.block_size
        parent = hashes[start - 1] if start > 0 else None
        event = BlockStored(tuple(hashes[start:end]), parent, tuple(ids[start * bs : end * bs]), bs, lora)
        self.events.append(event)

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
        victims: list[int] = []
        while never_used < n:
            victim, _ = self._evictable.popitem(last=False)
            del self._refs[victim]
            victims.append(victim)
            never_used += 1
        if victims:
            self.evictions += len(victims)
            if self.events is not None:
                self.events.append(BlockRemoved(tuple(victims)))

    def clear(self) -> bool:
        """Drop every cached block (vLLM's prefix-cache reset); False (no change) while any is in use."""
        if self.used_blocks:
            return False
        self._refs.clear()
        self._evictable.clear()
        if self.events is not None:
            self.events.append(AllBlocksCleared())
        return True

    def drain_events(self) -> list[KVEvent]:
        """Take the recorded events (empty when recording is off)."""
        if not self.events:
            return []
        out, self.events = self.events, []
        return out
