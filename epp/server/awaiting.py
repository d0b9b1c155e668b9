"""Requests whose usage an observer stream will report: ``x-request-id`` -> what the metrics need.

In the ``observability`` Envoy variant the routing stream does not see the response body; a second
ext_proc stream in observability mode does (see :mod:`epp.protocol.observer`). Both carry the same
``x-request-id`` (Envoy sets it before the filters run). When a routing stream that will not see its
response body dispatches a request, :meth:`AwaitingUsage.expect` remembers its model labels and start
time; the observer stream :meth:`~AwaitingUsage.take`\\ s the entry when its response ends.

A routing stream that ends before the response (Envoy closes it right after routing when the response
phase is skipped) may :meth:`~AwaitingUsage.defer` its completion: it attaches a ``finish`` callback to
the entry, which the observer calls with its :class:`~epp.protocol.actions.Observed` report, or which is
called with None when the entry expires or is evicted (complete with the routing stream's own outcome).

Bounds: at most ``capacity`` entries (the oldest is dropped beyond), each kept at most ``ttl_s`` seconds
(a request whose observer never comes). Entries are kept in insertion order, which is expiry order, so
every operation is O(1) amortised.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from epp.protocol import Observed

__all__ = ["DEFAULT_CAPACITY", "DEFAULT_TTL_S", "Awaited", "AwaitingUsage", "Finish"]

DEFAULT_CAPACITY = 10_000
DEFAULT_TTL_S = 600.0

Finish = Callable[[Observed | None], None]
_log = structlog.get_logger("epp.awaiting")


@dataclass(frozen=True, slots=True)
class Awaited:
    """A dispatched request: its metric labels and when it was received (on the stream clock)."""

    model: str
    target_model: str
    started: float
    fairness_id: str = "default-flow"
    priority: int = 0


class _Entry:
    __slots__ = ("awaited", "deadline", "finish")

    def __init__(self, deadline: float, awaited: Awaited) -> None:
        self.deadline = deadline
        self.awaited = awaited
        self.finish: Finish | None = None


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
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.dropped = 0  # entries expired or evicted before their observer came

    def __len__(self) -> int:
        return len(self._entries)

    def expect(
        self,
        request_id: str,
        model: str,
        target_model: str,
        started: float,
        fairness_id: str = "default-flow",
        priority: int = 0,
    ) -> None:
        """Remember a dispatched request (a repeated id replaces the older entry)."""
        if not request_id:
            return
        now = self._clock()
        entries = self._entries
        old = entries.pop(request_id, None)
        entries[request_id] = _Entry(
            now + self.ttl_s, Awaited(model, target_model, started, fairness_id, priority)
        )
        self._expire(now)
        while len(entries) > self.capacity:
            self._drop(entries.popitem(last=False)[1])
        if old is not None:
            self._drop(old)

    def defer(self, request_id: str, finish: Finish) -> bool:
        """Attach ``finish`` to the entry of ``request_id``; False (nothing attached) when there is none."""
        self._expire(self._clock())
        entry = self._entries.get(request_id)
        if entry is None or entry.finish is not None:
            return False
        entry.finish = finish
        return True

    def take(self, request_id: str) -> tuple[Awaited, Finish | None] | None:
        """Remove the entry of ``request_id``: its request and deferred ``finish`` (None if unknown)."""
        self._expire(self._clock())
        entry = self._entries.pop(request_id, None)
        return None if entry is None else (entry.awaited, entry.finish)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and next(iter(entries.values())).deadline <= now:
            self._drop(entries.popitem(last=False)[1])

    def _drop(self, entry: _Entry) -> None:
        self.dropped += 1
        if entry.finish is not None:
            try:
                entry.finish(None)
            except Exception:
                _log.exception("deferred completion failed")
