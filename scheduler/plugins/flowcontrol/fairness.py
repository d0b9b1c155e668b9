"""Fairness policies: which flow (fairness id) of a priority band goes next.

* ``global-strict-fairness-policy`` (GIE's default): no fairness; the band behaves as one queue. The
  flow whose next request comes first by the band's ordering policy goes (FCFS: the oldest request of
  the band; EDF: the earliest deadline). O(active flows) per pick.
* ``round-robin-fairness-policy``: the active flows take turns, one request each, in the order they
  became active (a flow that empties leaves the rotation; one that refills joins at the end). A flow
  offering 10x the requests of another gets the same share of dispatches while both wait. O(1) per
  pick.

Neither takes parameters; the per-band state is the object ``new_state`` returns.
"""

from __future__ import annotations

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
    __slots__ = ("_flows",)

    def __init__(self) -> None:
        self._flows: dict[int, FlowHandle] = {}  # insertion order is the rotation

    def activate(self, flow: FlowHandle) -> None:
        self._flows[id(flow)] = flow

    def deactivate(self, flow: FlowHandle) -> None:
        self._flows.pop(id(flow), None)

    def pick(self) -> FlowHandle | None:
        flows = self._flows
        if not flows:
            return None
        key = next(iter(flows))
        flow = flows.pop(key)
        flows[key] = flow  # to the end of the rotation
        return flow


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
