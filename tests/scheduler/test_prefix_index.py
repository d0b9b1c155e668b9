"""Prefix hashing, the index (match, LRU eviction, removal) and its capacity property."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.plugins.prefix.hashing import chain_seed, prefix_hashes
from scheduler.plugins.prefix.index import PrefixIndex


def test_hash_chain_only_full_blocks_and_capped() -> None:
    seed = chain_seed("m", "")
    assert prefix_hashes("x" * 63, seed, 64, 256) == []
    assert len(prefix_hashes("x" * 200, seed, 64, 256)) == 3
    assert len(prefix_hashes("x" * 6400, seed, 64, 10)) == 10


def test_hash_chain_identifies_prefixes() -> None:
    seed = chain_seed("m", "")
    a = prefix_hashes("A" * 64 + "B" * 64 + "C" * 64, seed, 64, 256)
    b = prefix_hashes("A" * 64 + "B" * 64 + "D" * 64, seed, 64, 256)
    c = prefix_hashes("Z" * 64 + "B" * 64 + "C" * 64, seed, 64, 256)
    assert a[:2] == b[:2] and a[2] != b[2]
    assert a[1] != c[1]  # same block, different prefix
    assert prefix_hashes("A" * 128, chain_seed("other", ""), 64, 256)[0] != a[0]
    assert prefix_hashes("A" * 128, chain_seed("m", "salt"), 64, 256)[0] != a[0]


def test_non_ascii_blocks_are_measured_in_characters() -> None:
    seed = chain_seed("m", "")
    text = "é" * 128
    assert len(prefix_hashes(text, seed, 64, 256)) == 2
    assert prefix_hashes(text, seed, 64, 256) != prefix_hashes("e" * 128, seed, 64, 256)


def test_match_counts_consecutive_blocks_per_endpoint() -> None:
    index = PrefixIndex(100)
    index.insert("a", [1, 2, 3, 4])
    index.insert("b", [1, 2])
    index.insert("c", [1, 9, 3, 4])  # holds blocks 3 and 4 but not block 2: only 1 consecutive
    index.insert("d", [7, 8])
    assert index.match([1, 2, 3, 4]) == {"a": 4, "b": 2, "c": 1}
    assert index.match([7, 8, 1]) == {"d": 2}
    assert index.match([5, 1]) == {}
    assert index.match([]) == {}


def test_lru_evicts_least_recently_used() -> None:
    index = PrefixIndex(3)
    index.insert("a", [1, 2, 3])
    index.insert("a", [1])  # touch 1: 2 is now the oldest
    index.insert("a", [4])
    assert index.entries("a") == 3
    assert index.match([2]) == {}
    assert index.match([1]) == {"a": 1} and index.match([4]) == {"a": 1}
    assert len(index) == 3  # hash 2 dropped from the owners map


def test_eviction_only_clears_own_bit() -> None:
    index = PrefixIndex(2)
    index.insert("a", [1, 2])
    index.insert("b", [1, 2])
    index.insert("a", [3, 4])
    assert index.match([1, 2]) == {"b": 2}
    assert index.match([3, 4]) == {"a": 2}


def test_remove_purges_and_reuses_slot() -> None:
    index = PrefixIndex(10)
    index.insert("a", [1, 2])
    index.insert("b", [1])
    index.remove(frozenset({"a", "unknown"}))
    assert index.match([1, 2]) == {"b": 1}
    assert index.addresses() == ["b"]
    index.insert("c", [2])
    assert index.match([1]) == {"b": 1} and index.match([2]) == {"c": 1}


def test_set_capacity_shrinks() -> None:
    index = PrefixIndex(10)
    index.insert("a", range(10))
    index.set_capacity("a", 4)
    assert index.entries("a") == 4 and index.capacity("a") == 4
    assert index.match([9]) == {"a": 1} and index.match([5]) == {}


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 12),
    ops=st.lists(st.tuples(st.sampled_from("abc"), st.lists(st.integers(0, 30), max_size=20)), max_size=40),
)
def test_capacity_never_exceeded_and_matches_reference_lru(
    capacity: int, ops: list[tuple[str, list[int]]]
) -> None:
    index = PrefixIndex(capacity)
    reference: dict[str, list[int]] = {}
    for address, hashes in ops:
        index.insert(address, hashes)
        lru = reference.setdefault(address, [])
        for h in hashes:
            if h in lru:
                lru.remove(h)
            lru.append(h)
        del lru[: max(0, len(lru) - capacity)]
        assert index.entries(address) <= capacity
        assert index.entries(address) == len(lru)
    for h in range(31):
        holders = {a for a, lru in reference.items() if h in lru}
        assert set(index.match([h])) == holders
    assert index.total_entries() == sum(len(v) for v in reference.values())


def test_lru_order_survives_compaction_of_retouches() -> None:
    index = PrefixIndex(4)
    for _ in range(100):  # 400 touches: the touch log is compacted several times
        index.insert("a", [1, 2, 3, 4])
    index.insert("a", [1, 3])
    index.insert("a", [5])  # evicts 2, the least recently used
    assert index.entries("a") == 4
    assert set(index.match([2])) == set() and index.match([1]) == {"a": 1} and index.match([4]) == {"a": 1}
    index.insert("a", [6])  # then 4
    assert index.match([4]) == {} and index.match([3]) == {"a": 1}
