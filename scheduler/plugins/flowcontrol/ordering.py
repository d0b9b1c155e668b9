"""Ordering policies: which request of a flow goes next.

* ``fcfs-ordering-policy`` (GIE's default): first come, first served, by arrival sequence. Queue: a
  deque (push/pop O(1)).
* ``edf-ordering-policy``: earliest deadline first, ``deadline = enqueue time + TTL``; requests without
  a TTL have an infinite deadline and go after every time-bound one; ties by arrival (FCFS). Queue: a
  binary heap (push/pop O(log n)).
* ``slo-deadline-ordering-policy`` (llm-d-router): earliest SLO deadline first, ``deadline = arrival +
  x-llm-d-slo-ttft-ms`` (the deprecated ``x-slo-ttft-ms`` when the first is absent; arrival: the time
  the request joined flow control); a missing, empty, non-integer, negative or overflowing header (over
  ``2**63 - 1`` ns) means no deadline: after every SLO-bound request. Ties by arrival (FCFS). Queue: a
  binary heap.

None takes parameters. Removed items are skipped lazily (see :mod:`.interfaces`).
"""

from __future__ import annotations

import heapq
import math
import re
from collections import deque
from collections.abc import Callable

from scheduler.headers import LLMD_SLO_TTFT_HEADER, SLO_TTFT_HEADER
from scheduler.interfaces import Handle
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.plugins.flowcontrol.interfaces import FlowQueue, QueuedItem

__all__ = [
    "SLO_TTFT_HEADERS",
    "EdfOrdering",
    "FcfsOrdering",
    "SloDeadlineOrdering",
    "edf_factory",
    "fcfs_factory",
    "slo_deadline",
    "slo_deadline_factory",
]

SLO_TTFT_HEADERS = (LLMD_SLO_TTFT_HEADER, SLO_TTFT_HEADER)
"""The TTFT SLO header in milliseconds, then its deprecated alias (upstream's lookup order)."""
_MAX_MS = (2**63 - 1) // 1_000_000  # the largest ms a Go time.Duration holds
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.ParseInt(s, 10, 64) accepts


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
    __slots__ = ("_heap", "_key")

    def __init__(self, key: Callable[[QueuedItem], tuple[float, int]]) -> None:
        self._heap: list[tuple[float, int, QueuedItem]] = []
        self._key = key

    def push(self, item: QueuedItem) -> None:
        heapq.heappush(self._heap, (*self._key(item), item))

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
        return _HeapQueue(self.key)

    def key(self, item: QueuedItem) -> tuple[float, int]:
        return (item.deadline, item.seq)


def slo_deadline(item: QueuedItem) -> float:
    """The item's SLO deadline in clock seconds (``inf``: none; see the module docstring)."""
    headers = item.headers
    for name in SLO_TTFT_HEADERS:
        raw = headers.get(name)
        if raw is not None:
            break
    else:
        return math.inf
    raw = raw.strip()
    if not _INTEGER.fullmatch(raw):
        return math.inf
    ms = int(raw)
    if ms < 0 or ms > _MAX_MS:
        return math.inf
    return item.enqueued_at + ms / 1000.0


class SloDeadlineOrdering(PluginBase):
    """Earliest SLO deadline (arrival + the TTFT SLO header) first; FCFS among equal deadlines."""

    plugin_type = "slo-deadline-ordering-policy"

    def new_queue(self) -> FlowQueue:
        return _HeapQueue(self.key)

    def key(self, item: QueuedItem) -> tuple[float, int]:
        return (slo_deadline(item), item.seq)


def _fcfs(name: str, handle: Handle) -> FcfsOrdering:
    return FcfsOrdering(name)


def _edf(name: str, handle: Handle) -> EdfOrdering:
    return EdfOrdering(name)


def _slo(name: str, handle: Handle) -> SloDeadlineOrdering:
    return SloDeadlineOrdering(name)


fcfs_factory = factory_without_params(FcfsOrdering.plugin_type, _fcfs)
edf_factory = factory_without_params(EdfOrdering.plugin_type, _edf)
slo_deadline_factory = factory_without_params(SloDeadlineOrdering.plugin_type, _slo)
