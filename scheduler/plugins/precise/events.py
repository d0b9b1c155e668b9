"""Applying vLLM KV-event batches to a :class:`~scheduler.plugins.precise.index.KVBlockIndex` (pure).

vLLM's ``ZmqEventPublisher`` sends ``[topic, seq (8 bytes, big-endian), payload]`` where the payload is
a msgpack ``KVEventBatch`` encoded by msgspec with ``array_like`` structs, trailing defaults omitted::

    [ts, [event, ...], data_parallel_rank?]
    ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
     lora_name, extra_keys?, group_idx?, kv_cache_spec_kind?, kv_cache_spec_sliding_window?, ...]
    ["BlockRemoved", block_hashes, medium?, group_idx?]
    ["AllBlocksCleared", ...]

Older vLLM releases stop after ``lora_id`` (no medium: GPU) and send ``["BlockRemoved", hashes]``.
Hashes are ints (or digest bytes when ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0``). The transport
(:mod:`datalayer.kv_events`) unpacks the payload and calls :meth:`KVEventIngester.ingest` with it.

Per source (one server's publisher) the sequence number is tracked:

* the next number, or the first one seen: applied;
* a repeat of the last number with the same batch timestamp: a duplicate, skipped;
* a smaller number, or the last number with another timestamp: the publisher restarted (its cache is
  gone; a fresh publisher counts from 0 again and its first batches may be lost while subscribers
  connect, so its numbers can meet the old ones): everything the source held is dropped, then the
  batch is applied (``restarts``);
* a larger jump: batches were lost (the publisher's high-water mark, a reconnect): the missing count
  is added to ``missed_batches`` and the batch applied; blocks stored meanwhile are unknown until
  re-stored, removals missed linger until the server clears or the index's budget resets it.

Stored events of a hybrid model's non-attention cache groups (``kv_cache_spec_kind`` other than full
or MLA attention) are skipped: their blocks are not prompt prefixes (counted per kind in
``skipped_stores``, at most 16 kinds, further ones as ``other``). ``admitted`` / ``evicted`` count the
block keys stored / removed (llm-d's index admissions and evictions). A malformed batch or event is
counted in ``malformed`` and skipped, never raised. When a ``BlockKeyer`` is given, a stored run
that starts a chain (no parent, no LoRA, no extra keys) is re-hashed from its token ids and compared
with the server's hash: ``hash_checks`` / ``hash_mismatches`` tell whether the picker's algorithm and
seed match the server's (a mismatch means no request will ever match that server's blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.plugins.precise.hashing import KEY_MASK, BlockKeyer
from scheduler.plugins.precise.index import KVBlockIndex

__all__ = ["PREFIX_KINDS", "KVEventIngester"]

PREFIX_KINDS = frozenset({None, "full_attention", "mla_attention", "sink_full_attention"})


def _key(h: Any) -> int:
    if isinstance(h, int):
        return h & KEY_MASK
    if isinstance(h, bytes):
        return int.from_bytes(h[-8:], "big") & KEY_MASK
    raise TypeError(f"block hash of type {type(h).__name__}")


def _keys(hashes: Sequence[Any]) -> list[int]:
    try:
        return [h & KEY_MASK for h in hashes]
    except TypeError:
        return [_key(h) for h in hashes]


def _medium(value: Any) -> str:
    return value.lower() if isinstance(value, str) and value else "gpu"


class KVEventIngester:
    """Applies event batches of many sources to one index, tracking each source's sequence."""

    __slots__ = (
        "_last_seq",
        "_last_ts",
        "admitted",
        "batches",
        "events",
        "evicted",
        "hash_checks",
        "hash_mismatches",
        "index",
        "keyer",
        "malformed",
        "missed_batches",
        "restarts",
        "skipped_stores",
    )

    def __init__(self, index: KVBlockIndex, keyer: BlockKeyer | None = None) -> None:
        self.index = index
        self.keyer = keyer
        self._last_seq: dict[str, int] = {}
        self._last_ts: dict[str, Any] = {}
        self.batches = 0
        self.events = 0
        self.missed_batches = 0
        self.restarts = 0
        self.malformed = 0
        self.hash_checks = 0
        self.hash_mismatches = 0
        self.admitted = 0
        self.evicted = 0
        self.skipped_stores: dict[str, int] = {}  # cache kind -> stored events skipped (<= 16 kinds)

    def forget(self, source: str) -> None:
        """The source went away (endpoint removed, subscriber closed): drop its blocks and sequence."""
        self._last_seq.pop(source, None)
        self._last_ts.pop(source, None)
        self.index.clear(source)

    def ingest(self, source: str, seq: int, batch: Any) -> None:
        """Apply one unpacked ``KVEventBatch`` published by ``source`` with sequence number ``seq``."""
        last = self._last_seq.get(source)
        try:
            ts = batch[0]
        except (TypeError, IndexError, KeyError):
            ts = None
        if last is not None:
            if seq == last and ts == self._last_ts.get(source):
                return
            if seq <= last:
                self.restarts += 1
                self.index.clear(source)
            elif seq > last + 1:
                self.missed_batches += seq - last - 1
        if len(self._last_seq) < self.index.max_sources or last is not None:
            self._last_seq[source] = seq
            self._last_ts[source] = ts
        self.batches += 1
        try:
            events = batch[1]
            iter(events)
        except (TypeError, IndexError, KeyError):
            self.malformed += 1
            return
        for event in events:
            try:
                self._apply(source, event)
            except (TypeError, IndexError, ValueError, AttributeError):
                self.malformed += 1

    def _apply(self, source: str, event: Sequence[Any]) -> None:
        kind = event[0]
        self.events += 1
        if kind == "BlockStored":
            if len(event) > 10 and event[10] not in PREFIX_KINDS:
                self._skip(event[10])
                return
            keys = _keys(event[1])
            self.index.store(source, keys, _medium(event[6]) if len(event) > 6 else "gpu")
            self.admitted += len(keys)
            if self.keyer is not None and event[2] is None:
                self._check(event)
        elif kind == "BlockRemoved":
            keys = _keys(event[1])
            self.index.remove(source, keys, _medium(event[2]) if len(event) > 2 else "gpu")
            self.evicted += len(keys)
        elif kind == "AllBlocksCleared":
            self.index.clear(source)
        else:
            raise ValueError(f"unknown event {kind!r}")

    def _skip(self, kind: Any) -> None:
        label = kind if isinstance(kind, str) and kind else "unknown"
        skipped = self.skipped_stores
        if label not in skipped and len(skipped) >= 16:
            label = "other"
        skipped[label] = skipped.get(label, 0) + 1

    def _check(self, event: Sequence[Any]) -> None:
        keyer = self.keyer
        assert keyer is not None
        lora_name = event[7] if len(event) > 7 else None
        extra = event[8] if len(event) > 8 else None
        if lora_name or (extra and any(extra)) or not event[1] or event[4] != keyer.block_size:
            return
        tokens = event[3]
        if len(tokens) < keyer.block_size:
            return
        self.hash_checks += 1
        if keyer.keys(tokens[: keyer.block_size])[0] != _key(event[1][0]):
            self.hash_mismatches += 1
