"""``fair-share-fairness-policy`` (ours, no upstream equivalent): round-robin between the flows of a
priority band, plus a per-flow ceiling that keeps room free for the band's other flows.

Upstream's fairness policies only choose *which* waiting flow goes next; once a dominant flow (a
tenant offering many times the pool's capacity) keeps every slot busy, a light flow's request waits
for the next completion and is then prefilled in a full batch. This policy holds capacity back from a
dominant flow while other flows of its band are active, so a light flow finds a free slot on arrival.

The rule, for a flow ``f`` of band ``p`` (fairness ids as the flow controller's flows):

* **active flows** of the band: those with a request waiting in the band, a request in flight
  (dispatched, not completed: the ``dispatched`` / ``completed`` hooks count them), or any arrival,
  dispatch or completion within the last ``activeWindowSeconds``; ``k`` of them, ``f`` included;
* ``f`` is **over its share** when ``k > 1`` and ``inflight_f * k > inflight_band`` (it holds more
  than ``1/k`` of the band's requests in flight). A lone flow is never over its share;
* a flow over its share is dispatched only while ``usage_f + reserve < ceiling``, where ``ceiling`` is
  the band's (the usage-limit policy's) and ``usage_f = saturation * inflight_f / inflight_pool`` its
  part of the pool's saturation (the detector's): it stops holding ``ceiling - reserve`` of the pool,
  so ``reserve`` stays for the others whether or not they use it at that moment. Every other flow is
  dispatched as usual (while the saturation is below the band's ceiling).

With ``concurrency-detector`` (saturation = requests in flight / slots) and a ceiling of 1.0,
``usage_f`` is ``inflight_f / slots`` and ``reserve: r`` keeps ``floor(r * slots)`` slots out of a
dominant flow's reach (e.g. 8 slots, ``reserve: 0.25``: it stops at 6). With two active flows at most
one can be over its share, so the light flow is dispatched the moment it arrives while a slot is free
(and the reserve keeps one free for it), and the dominant one is never starved: it is held only while
above ``1/k`` of the band's requests in flight, and only at ``ceiling - reserve``. Work-conserving when
a flow is alone; otherwise the cost is bounded: at most ``reserve`` of the pool stays idle, for at most
``activeWindowSeconds`` after the other flows' last activity (the bench prints the dominant tenant's
throughput with and without it).

Among the admitted waiting flows the turn goes round-robin, as ``round-robin-fairness-policy`` (the
cursor on the fairness id served last, cyclic order of the ids). When every waiting flow of the band
is held back, the band waits, and so do the bands below it (strict priority: the reserve is kept for
the band's other flows, not handed to a lower band).

Parameters: ``reserve`` (float in [0, 1), default 0.1; 0 makes the policy plain round-robin) and
``activeWindowSeconds`` (float >= 0, default 1.0). Reading the saturation as a share of the pool
assumes a detector that counts requests (``concurrency-detector``); with ``utilization-detector`` the
``usage_f`` is an estimate that moves between scrapes only.

Budget (ours): at most :data:`MAX_FLOWS` (priority, fairness id) records; a record goes when its flow
has nothing waiting or in flight and no activity for ``activeWindowSeconds`` (swept from the oldest
on every call), and past the cap the least recently active record is forgotten (its requests in
flight with it). Event-loop only, like the flow controller.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.interfaces import Handle
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.flowcontrol.fairness import _RoundRobinState
from scheduler.plugins.flowcontrol.interfaces import (
    FairnessState,
    FlowHandle,
    OrderingPolicy,
    ShareLimitedState,
)
from scheduler.types import DEFAULT_FAIRNESS_ID, Completion, LLMRequest, SchedulingResult

__all__ = ["MAX_FLOWS", "FairShareFairness", "FairShareParams", "factory"]

MAX_FLOWS = 10_000
"""(priority, fairness id) records kept at most (ours)."""
_EPS = 1e-9  # saturation is a ratio of counts: 6/8 + 0.25 against 1.0 must compare as equal

_Key = tuple[int, str]


@dataclass(frozen=True, slots=True)
class FairShareParams:
    reserve: float = param(0.1, ge=0, lt=1)
    active_window_seconds: float = param(1.0, ge=0)


class _Record:
    __slots__ = ("in_flight", "touched", "waiting")

    def __init__(self, now: float) -> None:
        self.in_flight = 0
        self.waiting = False
        self.touched = now


class _BandState(_RoundRobinState):
    """One band's waiting flows, round-robin, skipping the flows held back at their ceiling."""

    __slots__ = ("_plugin", "_priority")

    def __init__(self, plugin: FairShareFairness, priority: int) -> None:
        super().__init__()
        self._plugin = plugin
        self._priority = priority

    def activate(self, flow: FlowHandle) -> None:
        super().activate(flow)
        self._plugin.set_waiting(self._priority, flow.fairness_id, True)

    def deactivate(self, flow: FlowHandle) -> None:
        had = self._flows.get(flow.fairness_id) is flow
        super().deactivate(flow)
        if had:
            self._plugin.set_waiting(self._priority, flow.fairness_id, False)

    def pick(self) -> FlowHandle | None:
        """Without capacity information: plain round-robin (nothing is held back)."""
        return self.pick_within(0.0, math.inf)

    def pick_within(self, saturation: float, ceiling: float) -> FlowHandle | None:
        keys = self._keys
        if not keys:
            self._last = None
            return None
        n = len(keys)
        start = 0 if self._last is None else bisect_right(keys, self._last)
        admitted = self._plugin.admitted
        for j in range(n):
            key = keys[(start + j) % n]
            if admitted(self._priority, key, saturation, ceiling):
                self._last = key
                return self._flows[key]
        return None


class FairShareFairness(PluginBase):
    """The ``fair-share-fairness-policy`` fairness policy (see the module docstring)."""

    plugin_type = "fair-share-fairness-policy"

    def __init__(
        self, name: str, params: FairShareParams, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(name)
        self.params = params
        self._clock = clock
        self._reserve = params.reserve
        self._window = params.active_window_seconds
        self._records: OrderedDict[_Key, _Record] = OrderedDict()  # least recently active first
        self._active: dict[int, int] = {}  # band -> records (active flows)
        self._in_flight: dict[int, int] = {}  # band -> requests in flight
        self._total = 0  # requests in flight, every band

    # -- fairness policy

    def new_state(self, ordering: OrderingPolicy) -> FairnessState:
        return _BandState(self, 0)

    def new_band_state(self, ordering: OrderingPolicy, priority: int) -> ShareLimitedState:
        return _BandState(self, priority)

    def admits(self, priority: int, fairness_id: str, saturation: float, ceiling: float) -> bool:
        self._touch((priority, fairness_id or DEFAULT_FAIRNESS_ID), self._clock())
        return self.admitted(priority, fairness_id, saturation, ceiling)

    def admitted(self, priority: int, fairness_id: str, saturation: float, ceiling: float) -> bool:
        """Whether flow ``fairness_id`` of band ``priority`` may be dispatched at ``saturation`` under
        the band's ``ceiling``: within its share, or its usage plus the reserve below the ceiling."""
        self._sweep(self._clock())
        record = self._records.get((priority, fairness_id or DEFAULT_FAIRNESS_ID))
        if record is None or not self._over_share(priority, record):
            return True
        usage = saturation * record.in_flight / self._total if self._total else 0.0
        return usage + self._reserve < ceiling - _EPS

    def over_share(self, priority: int, fairness_id: str) -> bool:
        """Whether the flow holds more than ``1/k`` of its band's requests in flight, ``k`` > 1 being
        the band's active flows (as of the last sweep)."""
        record = self._records.get((priority, fairness_id or DEFAULT_FAIRNESS_ID))
        return record is not None and self._over_share(priority, record)

    def _over_share(self, priority: int, record: _Record) -> bool:
        k = self._active.get(priority, 0)
        return k > 1 and record.in_flight * k > self._in_flight.get(priority, 0)

    def set_waiting(self, priority: int, fairness_id: str, waiting: bool) -> None:
        """A band state's flow started (or stopped) waiting; counts as activity."""
        self._touch((priority, fairness_id or DEFAULT_FAIRNESS_ID), self._clock()).waiting = waiting

    # -- request lifecycle hooks

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        """Count the request in flight for its flow (``priority``, ``fairness_id``)."""
        priority = request.priority
        record = self._touch((priority, request.fairness_id or DEFAULT_FAIRNESS_ID), self._clock())
        record.in_flight += 1
        self._in_flight[priority] = self._in_flight.get(priority, 0) + 1
        self._total += 1

    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        """Uncount it (every dispatch completes exactly once; a forgotten record is left alone)."""
        key = (request.priority, request.fairness_id or DEFAULT_FAIRNESS_ID)
        record = self._records.get(key)
        if record is None or not record.in_flight:
            return
        record.in_flight -= 1
        self._in_flight[key[0]] -= 1
        self._total -= 1
        self._touch(key, self._clock())

    # -- state

    def tracked(self) -> int:
        """(priority, fairness id) records held."""
        return len(self._records)

    def in_flight(self, priority: int, fairness_id: str) -> int:
        """Requests of the flow in flight, as counted by the hooks."""
        record = self._records.get((priority, fairness_id or DEFAULT_FAIRNESS_ID))
        return 0 if record is None else record.in_flight

    def dump_state(self) -> dict[str, Any]:
        """For ``/debug/plugins/state``: aggregates only (fairness ids come from a client header)."""
        return {
            "trackedFlows": len(self._records),
            "activeFlowsByBand": {str(p): n for p, n in self._active.items()},
            "inFlightByBand": {str(p): n for p, n in self._in_flight.items()},
        }

    # -- internals

    def _touch(self, key: _Key, now: float) -> _Record:
        self._sweep(now)
        records = self._records
        record = records.get(key)
        if record is None:
            if len(records) >= MAX_FLOWS:
                self._forget(next(iter(records)))
            record = records[key] = _Record(now)
            self._active[key[0]] = self._active.get(key[0], 0) + 1
        else:
            record.touched = now
            records.move_to_end(key)
        return record

    def _sweep(self, now: float) -> None:
        """Drop the records idle past the window, oldest first; a waiting or in-flight one is active
        now (its time refreshed, so each is visited at most once per window)."""
        records = self._records
        cutoff = now - self._window
        while records:
            key, record = next(iter(records.items()))
            if record.touched >= cutoff:
                return
            if record.waiting or record.in_flight:
                record.touched = now
                records.move_to_end(key)
            else:
                self._forget(key)

    def _forget(self, key: _Key) -> None:
        record = self._records.pop(key)
        priority = key[0]
        if record.in_flight:
            self._in_flight[priority] -= record.in_flight
            self._total -= record.in_flight
        if not self._in_flight.get(priority, 1):
            del self._in_flight[priority]
        self._active[priority] -= 1
        if not self._active[priority]:
            del self._active[priority]


def _build(name: str, params: FairShareParams, handle: Handle) -> FairShareFairness:
    return FairShareFairness(name, params, handle.clock)


factory = factory_with_params(FairShareFairness.plugin_type, FairShareParams, _build)
