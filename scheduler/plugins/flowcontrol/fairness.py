"""Fairness policies: which flow (fairness id) of a priority band goes next.

* ``global-strict-fairness-policy`` (GIE's default): no fairness; the band behaves as one queue. The
  flow whose next request comes first by the band's ordering policy goes (FCFS: the oldest request of
  the band; EDF: the earliest deadline). O(active flows) per pick.
* ``round-robin-fairness-policy``: the waiting flows take turns, one request each, in the cyclic order
  of their fairness ids, from a cursor on the flow served last (llm-d-router's: the next waiting flow
  after the last selected one in sorted key order; the cursor starts afresh when the band empties, as
  upstream's next dispatch cycle resets it). A flow that refills is served when the cursor reaches it:
  after a burst of one flow, a returning flow goes next, not behind the flow that was just served. A
  flow offering 10x the requests of another gets the same share of dispatches while both wait.
  O(log n) per pick, O(n) (a list insert or delete) per flow that starts or stops waiting, n the
  band's waiting flows.

Neither takes parameters; the per-band state is the object ``new_state`` returns.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

from scheduler.interfaces import Handle
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.plugins.flowcontrol.interfaces import FairnessState, FlowHandle, OrderingPolicy

__all__ = ["GlobalStrictFairness", "RoundRobinFairness", "global_strict_factory", "round_robin_factory"]


class _GlobalStrictState:
    __slots__ = ("_flows", "_key")

    def __init__(self, ordering: OrderingPolicy) -> None:
        self._flows: dict[int, FlowHandle] = {}
        self._key = ordering.key

    def activate(self, flow: FlowHandle) -> None:
        self._flows[id(flow)] = flow

    def deactivate(self, flow: FlowHandle) -> None:
        self._flows.pop(id(flow), None)

    def pick(self) -> FlowHandle | None:
        best: FlowHandle | None = None
        best_key: tuple[float, int] | None = None
        key = self._key
        for flow in self._flows.values():
            head = flow.queue.peek()
            if head is None:
                continue
            k = key(head)
            if best_key is None or k < best_key:
                best, best_key = flow, k
        return best


class _RoundRobinState:
    __slots__ = ("_flows", "_keys", "_last")

    def __init__(self) -> None:
        self._flows: dict[str, FlowHandle] = {}  # waiting flows by fairness id
        self._keys: list[str] = []  # their fairness ids, sorted
        self._last: str | None = None  # the fairness id served last (the cursor)

    def activate(self, flow: FlowHandle) -> None:
        key = flow.fairness_id
        if key not in self._flows:
            insort(self._keys, key)
        self._flows[key] = flow

    def deactivate(self, flow: FlowHandle) -> None:
        key = flow.fairness_id
        if self._flows.get(key) is flow:
            del self._flows[key]
            keys = self._keys
            del keys[bisect_left(keys, key)]

    def pick(self) -> FlowHandle | None:
        keys = self._keys
        if not keys:
            self._last = None
            return None
        last = self._last
        i = 0 if last is None else bisect_right(keys, last)
        key = keys[i % len(keys)]
        self._last = key
        return self._flows[key]


class GlobalStrictFairness(PluginBase):
    plugin_type = "global-strict-fairness-policy"

    def new_state(self, ordering: OrderingPolicy) -> FairnessState:
        return _GlobalStrictState(ordering)


class RoundRobinFairness(PluginBase):
    plugin_type = "round-robin-fairness-policy"

    def new_state(self, ordering: OrderingPolicy) -> FairnessState:
        return _RoundRobinState()


def _global_strict(name: str, handle: Handle) -> GlobalStrictFairness:
    return GlobalStrictFairness(name)


def _round_robin(name: str, handle: Handle) -> RoundRobinFairness:
    return RoundRobinFairness(name)


global_strict_factory = factory_without_params(GlobalStrictFairness.plugin_type, _global_strict)
round_robin_factory = factory_without_params(RoundRobinFairness.plugin_type, _round_robin)
