"""Requests whose usage an observer stream will report: ``x-request-id`` -> what the metrics need.

In the ``observability`` Envoy variant the routing stream does not see the response body; a second
ext_proc stream in observability mode does (see :mod:`epp.protocol.observer`). Both carry the same
``x-request-id`` (Envoy sets it before the filters run). When a routing stream that will not see its
response body dispatches a request, :meth:`AwaitingUsage.expect` remembers its model labels and start
time; the observer stream :meth:`~AwaitingUsage.take`\\ s the entry when its response ends.

Bounds: at most ``capacity`` entries (the oldest is dropped beyond), each kept at most ``ttl_s`` seconds
(a request whose observer never comes, e.g. with a config that has no observer filter). Entries are
kept in insertion order, which is expiry order, so every operation is O(1) amortised.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DEFAULT_CAPACITY", "DEFAULT_TTL_S", "Awaited", "AwaitingUsage"]

DEFAULT_CAPACITY = 10_000
DEFAULT_TTL_S = 600.0


@dataclass(frozen=True, slots=True)
class Awaited:
    """A dispatched request: its metric labels and when it was received (on the stream clock)."""

    model: str
    target_model: str
    started: float


class AwaitingUsage:
    """The bounded, expiring map. Not thread-safe; used from the event loop only."""

    __slots__ = ("_clock", "_entries", "capacity", "dropped", "ttl_s")

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if capacity <= 0 or ttl_s <= 0:
            raise ValueError(f"capacity and ttl_s must be positive, got {capacity} and {ttl_s}")
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, Awaited]] = OrderedDict()
        self.dropped = 0  # entries expired or evicted before their observer came

    def __len__(self) -> int:
        return len(self._entries)

    def expect(self, request_id: str, model: str, target_model: str, started: float) -> None:
        """Remember a dispatched request (a repeated id replaces the older entry)."""
        if not request_id:
            return
        now = self._clock()
        entries = self._entries
        entries.pop(request_id, None)
        entries[request_id] = (now + self.ttl_s, Awaited(model, target_model, started))
        self._expire(now)
        while len(entries) > self.capacity:
            entries.popitem(last=False)
            self.dropped += 1

    def take(self, request_id: str) -> Awaited | None:
        """Remove and return the entry of ``request_id`` (None if unknown, consumed or expired)."""
        now = self._clock()
        self._expire(now)
        item = self._entries.pop(request_id, None)
        return None if item is None else item[1]

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries:
            deadline = next(iter(entries.values()))[0]
            if deadline > now:
                return
            entries.popitem(last=False)
            self.dropped += 1
