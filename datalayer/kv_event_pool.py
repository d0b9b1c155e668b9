"""The sharded worker pool that applies received KV-event messages (``kvEventsConfig.concurrency``).

As llm-d's ``kvevents.Pool``: ``concurrency`` workers, each draining its own queue; a message goes to
the queue of shard ``fnv1a32(publisher id) % concurrency``, so one publisher's batches are always
applied by the same worker, in arrival order (the sequence tracking of
:class:`~scheduler.plugins.precise.events.KVEventIngester` relies on it). A worker unpacks the msgpack
payload and hands the batch to the ingester.

The workers are asyncio tasks of the picker's event loop: they take turns, each yielding to the loop
after :data:`SLICE` (0.2 ms) of work, so a burst of events (a publisher's whole backlog arriving at once
after a reconnect) never holds the request path for longer than a slice per worker. With ``concurrency`` N the
publishers are spread over N queues: a flooding publisher fills its own shard only, and the others'
batches keep being applied in turn. They do not run in parallel (one interpreter thread).

Memory budget: each shard queues at most :data:`SHARD_BUDGET` messages; a message arriving at a full
shard is dropped and counted (``queue_drops``); the publisher's next batch then shows a sequence gap
(``missed_batches``), exactly as a drop at the ZMQ high-water mark.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

__all__ = ["SHARD_BUDGET", "KVEventPool", "fnv1a32"]

SHARD_BUDGET = 4096  # messages queued per shard before further ones are dropped
SLICE = 0.0002  # seconds a worker (or a receiver) runs before it yields to the event loop
log = structlog.get_logger("datalayer.kv_events")

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a32(data: bytes) -> int:
    """The 32-bit FNV-1a hash (Go's ``hash/fnv.New32a``), llm-d's shard choice."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


class KVEventPool:
    """``concurrency`` ordered shards in front of ``ingest(source, seq, batch)``."""

    def __init__(
        self,
        concurrency: int,
        ingest: Callable[[str, int, Any], None],
        unpack: Callable[[bytes], Any],
        on_malformed: Callable[[], None],
        shard_budget: int = SHARD_BUDGET,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self.shard_budget = shard_budget
        self._ingest = ingest
        self._unpack = unpack
        self._on_malformed = on_malformed
        self._queues: list[asyncio.Queue[tuple[str, int, bytes]]] = [
            asyncio.Queue(maxsize=shard_budget) for _ in range(concurrency)
        ]
        self._shard_of: dict[str, int] = {}  # publisher id -> shard (<= 65,536 remembered)
        self._workers: list[asyncio.Task[None]] = []
        self.queue_drops = 0
        self.applied = [0] * concurrency  # messages applied per shard

    def shard(self, source: str) -> int:
        index = self._shard_of.get(source)
        if index is None:
            index = fnv1a32(source.encode()) % self.concurrency
            if len(self._shard_of) < 65536:
                self._shard_of[source] = index
        return index

    def add(self, source: str, seq: int, payload: bytes) -> bool:
        """Queue one message of ``source``; False (and counted) when its shard is full."""
        try:
            self._queues[self.shard(source)].put_nowait((source, seq, payload))
        except asyncio.QueueFull:
            self.queue_drops += 1
            return False
        return True

    def depth(self) -> int:
        """Messages queued across all shards."""
        return sum(q.qsize() for q in self._queues)

    def start(self) -> None:
        if not self._workers:
            self._workers = [
                asyncio.create_task(self._work(i), name=f"kv-events worker {i}")
                for i in range(self.concurrency)
            ]

    async def stop(self) -> None:
        workers, self._workers = self._workers, []
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for q in self._queues:  # queued messages are dropped with the pool, as upstream's shutdown
            while not q.empty():
                q.get_nowait()

    async def drain(self) -> None:
        """Wait until every queued message has been applied (tests, shutdown of a feed)."""
        await asyncio.gather(*(q.join() for q in self._queues))

    async def _work(self, index: int) -> None:
        queue = self._queues[index]
        ingest, unpack = self._ingest, self._unpack
        clock = time.perf_counter
        turn = clock()
        while True:
            if queue.empty():
                source, seq, payload = await queue.get()  # suspends: the turn ends
                turn = clock()
            else:
                source, seq, payload = queue.get_nowait()
            try:
                try:
                    batch = unpack(payload)
                except Exception:
                    self._on_malformed()
                    continue
                try:
                    ingest(source, seq, batch)
                except Exception:  # the ingester counts bad events itself; never lose the worker
                    log.exception("kv-event batch failed", source=source)
                self.applied[index] += 1
            finally:
                queue.task_done()
            if clock() - turn >= SLICE:  # the other workers and the request path get their turn
                await asyncio.sleep(0)
                turn = clock()
