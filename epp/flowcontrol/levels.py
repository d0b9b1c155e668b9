"""The priority levels a usage-limit policy ranks: the pool's provisioned priority bands, as upstream.

llm-d-router hands its usage-limit policy every *provisioned* priority level, not only the bands that
hold requests at that moment (``AllOrderedPriorityLevels``). A band is provisioned when it is

* static: priority 0 (always) and every ``flowControl.priorityBands`` entry;
* desired: the ``spec.priority`` of an InferenceObjective of the pool (the objective store's set, read
  on every call; it changes when objectives are added, changed or deleted);
* dynamic: the priority of a request that came through flow control — fast path or queue — within the
  last ``gc_after`` seconds (upstream's ``PriorityBandGCTimeout``, 10 minutes), or that still has
  requests queued.

This matters to ``priority-holdback-policy``: with InferenceObjectives ``critical`` (10) and
``sheddable`` (-1), the sheddable band keeps its lowest ceiling even while no critical request waits,
so the capacity above it stays free for critical requests that arrive later (they are dispatched at
once instead of waiting for a sheddable request to finish).

Bounds: at most :data:`MAX_DYNAMIC_LEVELS` dynamic levels (**ours**; priorities come from objectives,
so a pool has a handful); past it, the least recently seen one is forgotten (a level whose band still
holds requests is seen again by the next dispatch pass).
Expired dynamic levels are swept at most every :data:`SWEEP_INTERVAL_S` seconds, from the calls.

Pure apart from the times passed in; not thread-safe (the event loop's).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

__all__ = ["GC_AFTER_S", "MAX_DYNAMIC_LEVELS", "SWEEP_INTERVAL_S", "PriorityLevels"]

GC_AFTER_S = 600.0
MAX_DYNAMIC_LEVELS = 1000
SWEEP_INTERVAL_S = 30.0


class PriorityLevels:
    """The ordered (highest first) priority levels, and each level's index in that order."""

    __slots__ = ("_desired", "_desired_seen", "_dynamic", "_gc_after", "_index", "_levels", "_next_sweep",
                 "_static")  # fmt: skip

    def __init__(
        self,
        static: Iterable[int],
        desired: Callable[[], Collection[int]] | None = None,
        gc_after: float = GC_AFTER_S,
    ) -> None:
        """``static``: always provisioned (0 is added); ``desired``: the objectives' priorities (the
        same object is expected back while nothing changed, so a change costs one rebuild)."""
        self._static = frozenset(static) | {0}
        self._desired = desired
        self._desired_seen: Collection[int] | None = None
        self._dynamic: dict[int, float] = {}  # priority -> last seen
        self._gc_after = gc_after
        self._levels: tuple[int, ...] = ()
        self._index: dict[int, int] = {}
        self._next_sweep = 0.0
        self._rebuild()

    def seen(self, priority: int, now: float) -> None:
        """A request of ``priority`` came through flow control at ``now``."""
        if priority in self._static:
            return
        dynamic = self._dynamic
        known = priority in dynamic
        dynamic[priority] = now
        if known:
            return
        if len(dynamic) > MAX_DYNAMIC_LEVELS:
            oldest = min((p for p in dynamic if p != priority), key=dynamic.__getitem__)
            del dynamic[oldest]
        if priority not in self._index:
            self._rebuild()

    def current(self, now: float, queued: Callable[[int], bool]) -> tuple[tuple[int, ...], dict[int, int]]:
        """The levels (highest first) and ``{priority: index}``; ``queued(p)``: band ``p`` holds
        requests (such a level is never forgotten)."""
        desired = self._desired
        if desired is not None and desired() is not self._desired_seen:
            self._rebuild()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL_S
            limit = now - self._gc_after
            gone = [p for p, t in self._dynamic.items() if t <= limit and not queued(p)]
            for p in gone:
                del self._dynamic[p]
            if gone:
                self._rebuild()
        return self._levels, self._index

    def _rebuild(self) -> None:
        desired = self._desired() if self._desired is not None else ()
        self._desired_seen = desired
        levels = tuple(sorted(self._static.union(desired, self._dynamic), reverse=True))
        self._levels = levels
        self._index = {p: i for i, p in enumerate(levels)}
