"""Ordering policies: which request of a flow goes next.

* ``fcfs-ordering-policy`` (GIE's default): first come, first served, by arrival sequence. Queue: a
  deque (push/pop O(1)).
* ``edf-ordering-policy``: earliest deadline first, ``deadline = enqueue time + TTL``; requests without
  a TTL have an infinite deadline and go after every time-bound one; ties by arrival (FCFS). Queue: a
  binary heap (push/pop O(log n)).

Neither takes parameters. Removed items are skipped lazily (see :mod:`.interfaces`).
"""

from __future__ import annotations

import heapq
from collections import deque

from scheduler.interfaces import Handle
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.plugins.flowcontrol.interfaces import FlowQueue, QueuedItem

__all__ = ["EdfOrdering", "FcfsOrdering", "edf_factory", "fcfs_factory"]


class _FifoQueue:
    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[QueuedItem] = deque()

    def push(self, item: QueuedItem) -> None:
        self._items.append(item)

    def peek(self) -> QueuedItem | None:
        items = self._items
        while items and items[0].removed:
            items.popleft()
        return items[0] if items else None

    def pop(self) -> QueuedItem | None:
        items = self._items
        while items:
            item = items.popleft()
            if not item.removed:
                return item
        return None

    def compact(self) -> None:
        self._items = deque(i for i in self._items if not i.removed)


class _HeapQueue:
    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, QueuedItem]] = []

    def push(self, item: QueuedItem) -> None:
        heapq.heappush(self._heap, (item.deadline, item.seq, item))

    def peek(self) -> QueuedItem | None:
        heap = self._heap
        while heap and heap[0][2].removed:
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    def pop(self) -> QueuedItem | None:
        heap = self._heap
        while heap:
            item = heapq.heappop(heap)[2]
            if not item.removed:
                return item
        return None

    def compact(self) -> None:
        self._heap = [e for e in self._heap if not e[2].removed]
        heapq.heapify(self._heap)


class FcfsOrdering(PluginBase):
    """First come, first served."""

    plugin_type = "fcfs-ordering-policy"

    def new_queue(self) -> FlowQueue:
        return _FifoQueue()

    def key(self, item: QueuedItem) -> tuple[float, int]:
        return (0.0, item.seq)


class EdfOrdering(PluginBase):
    """Earliest deadline first (FCFS among equal deadlines)."""

    plugin_type = "edf-ordering-policy"

    def new_queue(self) -> FlowQueue:
        return _HeapQueue()

    def key(self, item: QueuedItem) -> tuple[float, int]:
        return (item.deadline, item.seq)


def _fcfs(name: str, handle: Handle) -> FcfsOrdering:
    return FcfsOrdering(name)


def _edf(name: str, handle: Handle) -> EdfOrdering:
    return EdfOrdering(name)


fcfs_factory = factory_without_params(FcfsOrdering.plugin_type, _fcfs)
edf_factory = factory_without_params(EdfOrdering.plugin_type, _edf)
