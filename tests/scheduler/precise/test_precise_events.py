"""KV-event batches as vLLM encodes them (msgspec), applied to the exact index."""

from __future__ import annotations

import msgpack
import pytest

from scheduler.plugins.precise.events import KVEventIngester
from scheduler.plugins.precise.hashing import KEY_MASK, BlockKeyer
from scheduler.plugins.precise.index import KVBlockIndex
from tests.vllm_kv_structs import ENCODER, AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch


def wire(*events: object, rank: int | None = None) -> object:
    """Encode as vLLM does and unpack as the transport does."""
    payload = ENCODER.encode(KVEventBatch(ts=1.5, events=list(events), data_parallel_rank=rank))
    return msgpack.unpackb(payload, raw=False)


def stored(
    hashes: list[int], medium: str | None = "GPU", parent: int | None = None, **kw: object
) -> BlockStored:
    return BlockStored(hashes, parent, list(range(16 * len(hashes))), 16, None, medium, None, **kw)  # type: ignore[arg-type]


GOLDEN = (  # msgspec's encoding of the batch below, as vLLM's publisher sends it
    "93cb3fe0000000000000939cab426c6f636b53746f7265649107c092010202c0a3475055c0c0c0c0c0"
    "94ac426c6f636b52656d6f7665649107a3475055c091b0416c6c426c6f636b73436c6561726564c0"
)


def test_golden_bytes_of_a_batch() -> None:
    events = [
        BlockStored([7], None, [1, 2], 2, None, "GPU", None),
        BlockRemoved([7], "GPU"),
        AllBlocksCleared(),
    ]
    payload = ENCODER.encode(KVEventBatch(ts=0.5, events=events))  # type: ignore[arg-type]
    assert payload.hex() == GOLDEN
    index = KVBlockIndex()
    ing = KVEventIngester(index)
    ing.ingest("a", 0, msgpack.unpackb(bytes.fromhex(GOLDEN)))
    assert ing.events == 3 and ing.malformed == 0 and index.size() == 0


def test_store_remove_clear() -> None:
    index = KVBlockIndex()
    ing = KVEventIngester(index)
    ing.ingest("a", 0, wire(stored([1, 2, 3]), stored([9], medium="CPU")))
    assert index.match([1, 2, 3, 4], "a").blocks == 3
    assert index.match([9], "a").weighted == pytest.approx(0.8)
    ing.ingest("a", 1, wire(BlockRemoved([2], "GPU")))
    assert index.match([1, 2, 3], "a").blocks == 1
    ing.ingest("a", 2, wire(AllBlocksCleared()))
    assert index.size("a") == 0


def test_tiers_weighted_prefix() -> None:
    index = KVBlockIndex()
    ing = KVEventIngester(index)
    ing.ingest("a", 0, wire(stored([1]), stored([2], medium="CPU"), stored([3])))
    m = index.match([1, 2, 3, 4], "a")
    assert (m.blocks, m.weighted) == (3, pytest.approx(2.8))


def test_sequence_restart_and_gap() -> None:
    index = KVBlockIndex()
    ing = KVEventIngester(index)
    first = wire(stored([1]))
    ing.ingest("a", 5, first)
    ing.ingest("a", 5, first)  # the same batch again: skipped
    assert ing.batches == 1 and index.match([1, 2], "a").blocks == 1
    ing.ingest("a", 9, wire(stored([2])))  # 3 batches lost
    assert ing.missed_batches == 3 and index.match([1, 2], "a").blocks == 2
    ing.ingest("a", 0, wire(stored([7])))  # the publisher restarted: its cache is gone
    assert ing.restarts == 1
    assert index.match([1], "a").blocks == 0 and index.match([7], "a").blocks == 1
    later = wire(stored([8]))
    later[0] = 9.0  # type: ignore[index]
    ing.ingest("a", 0, later)  # same number, another batch: restarted again (its seq 0 was lost)
    assert ing.restarts == 2 and index.match([7], "a").blocks == 0


def test_old_and_new_layouts_and_bytes_hashes() -> None:
    index = KVBlockIndex()
    ing = KVEventIngester(index)
    digest = bytes(range(32))
    old = ["BlockStored", [11], None, list(range(16)), 16, None]  # vLLM <= 0.9: no medium
    ing.ingest("a", 0, [0.0, [old, ["BlockStored", [digest], None, [], 16, None, "GPU", None]]])
    key = int.from_bytes(digest[-8:], "big") & KEY_MASK
    assert index.match([11], "a").blocks == 1 and index.match([key], "a").blocks == 1
    ing.ingest("a", 1, [0.0, [["BlockRemoved", [11]]]])
    assert index.match([11], "a").blocks == 0


def test_non_attention_groups_skipped_and_malformed_counted() -> None:
    index = KVBlockIndex()
    ing = KVEventIngester(index)
    ing.ingest("a", 0, wire(stored([1], group_idx=1, kv_cache_spec_kind="mamba")))
    assert index.size() == 0
    ing.ingest("a", 1, [0.0, [["Nope"], ["BlockStored"]]])
    ing.ingest("a", 2, "garbage")
    assert ing.malformed == 3
    ing.ingest("a", 3, wire(stored([1], group_idx=0, kv_cache_spec_kind="full_attention")))
    assert index.size() == 1


def test_hash_check_detects_a_seed_mismatch() -> None:
    keyer = BlockKeyer("sha256_cbor", "42", 16)
    ids = list(range(16))
    good = keyer.keys(ids)[0]
    ing = KVEventIngester(KVBlockIndex(), keyer)
    ing.ingest("a", 0, wire(BlockStored([good], None, ids, 16, None, "GPU", None)))
    assert (ing.hash_checks, ing.hash_mismatches) == (1, 0)
    other = BlockKeyer("sha256_cbor", "7", 16).keys(ids)[0]
    ing.ingest("a", 1, wire(BlockStored([other], None, ids, 16, None, "GPU", None)))
    assert (ing.hash_checks, ing.hash_mismatches) == (2, 1)


def test_budgets() -> None:
    index = KVBlockIndex(max_blocks_per_source=4, max_sources=1)
    ing = KVEventIngester(index)
    ing.ingest("a", 0, wire(stored([1, 2, 3])))
    ing.ingest("b", 0, wire(stored([1])))  # a second source is over the budget
    assert index.sources() == ["a"] and index.dropped_sources == 1
    ing.ingest("a", 1, wire(stored([4, 5])))  # 5 > 4 keys: removals were lost, re-learn
    assert index.overflow_resets == 1 and index.size("a") == 0
    ing.forget("a")
    assert index.sources() == []
