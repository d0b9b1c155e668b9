"""The KV-event worker pool (``kvEventsConfig.concurrency``): llm-d's FNV-1a shard choice, per-publisher
order across several workers, the shard budget, and turn-taking with other coroutines."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from datalayer.kv_event_pool import KVEventPool, fnv1a32


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)],  # the published FNV-1a test vectors
)
def test_fnv1a32_matches_the_reference_vectors(data: bytes, expected: int) -> None:
    assert fnv1a32(data) == expected


def _pool(concurrency: int, applied: list[tuple[str, int]], budget: int = 4096) -> KVEventPool:
    def ingest(source: str, seq: int, batch: Any) -> None:
        applied.append((source, seq))

    return KVEventPool(concurrency, ingest, lambda b: b, lambda: None, shard_budget=budget)


def test_a_publisher_always_lands_on_the_same_shard_and_publishers_spread() -> None:
    pool = _pool(8, [])
    sources = [f"10.0.0.{i}:8000" for i in range(64)]
    shards = {s: pool.shard(s) for s in sources}
    assert all(pool.shard(s) == shards[s] == fnv1a32(s.encode()) % 8 for s in sources)
    assert len(set(shards.values())) == 8


async def test_each_publishers_batches_are_applied_in_order_across_workers() -> None:
    applied: list[tuple[str, int]] = []
    pool = _pool(4, applied)
    pool.start()
    sources = [f"10.0.0.{i}:8000" for i in range(10)]
    for seq in range(50):
        for s in sources:
            assert pool.add(s, seq, b"")
    await pool.drain()
    await pool.stop()
    for s in sources:
        assert [q for src, q in applied if src == s] == list(range(50))
    assert sum(1 for n in pool.applied if n) > 1  # several workers did the work


async def test_a_full_shard_drops_and_counts() -> None:
    applied: list[tuple[str, int]] = []
    pool = _pool(1, applied, budget=3)
    results = [pool.add("a:1", i, b"") for i in range(5)]  # not started: nothing is drained
    assert results == [True, True, True, False, False] and pool.queue_drops == 2 and pool.depth() == 3
    pool.start()
    await pool.drain()
    await pool.stop()
    assert applied == [("a:1", 0), ("a:1", 1), ("a:1", 2)] and pool.depth() == 0


async def test_workers_yield_to_the_event_loop_after_each_slice() -> None:
    applied: list[tuple[str, int]] = []

    def slow_ingest(source: str, seq: int, batch: Any) -> None:  # 50 us of work per batch
        until = time.perf_counter() + 50e-6
        while time.perf_counter() < until:
            pass
        applied.append((source, seq))

    pool = KVEventPool(1, slow_ingest, lambda b: b, lambda: None)
    for i in range(100):
        pool.add("a:1", i, b"")
    ticks: list[int] = []

    async def other() -> None:  # a request handler's turns while a backlog is applied
        for _ in range(20):
            ticks.append(len(applied))
            await asyncio.sleep(0)

    pool.start()
    await asyncio.gather(other(), pool.drain())
    await pool.stop()
    assert len(applied) == 100
    # a slice (0.2 ms) is a few batches: the other coroutine got turns while the backlog was applied
    assert ticks[5] < 50, ticks


async def test_a_bad_payload_is_counted_and_the_worker_goes_on() -> None:
    applied: list[tuple[str, int]] = []
    bad: list[int] = []

    def unpack(payload: bytes) -> Any:
        if payload == b"bad":
            raise ValueError("not msgpack")
        return payload

    pool = KVEventPool(2, lambda s, q, b: applied.append((s, q)), unpack, lambda: bad.append(1))
    pool.start()
    pool.add("a:1", 0, b"bad")
    pool.add("a:1", 1, b"ok")
    await pool.drain()
    await pool.stop()
    assert applied == [("a:1", 1)] and bad == [1]


def test_concurrency_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        _pool(0, [])
