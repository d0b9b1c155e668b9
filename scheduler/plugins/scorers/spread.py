"""``spread-scorer`` (GPUStack placement policy): spread work evenly, the emptiest endpoint first.

The inverse of ``binpack-scorer``, for fault tolerance and even load. With ``load`` and
``capacity`` as in :mod:`scheduler.plugins.scorers.placement`::

    score = 1 - min(max(load, 0), capacity) / capacity      # full (or over) -> 0

Parameters: ``load`` (``kv`` | ``queue`` | ``running``, default ``kv``); ``capacity`` (number > 0,
default per load kind). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.scorers.placement import PlacementParams, loads
from scheduler.types import EndpointView, LLMRequest

__all__ = ["SpreadScorer", "factory"]


class SpreadScorer(PluginBase):
    plugin_type = "spread-scorer"

    def __init__(self, name: str, params: PlacementParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or PlacementParams()
        self._kind = params.load
        self._capacity = params.effective_capacity

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        capacity = self._capacity
        return [1.0 - min(max(load, 0.0), capacity) / capacity for load in loads(self._kind, endpoints)]


factory = factory_with_params(
    SpreadScorer.plugin_type, PlacementParams, lambda name, params, handle: SpreadScorer(name, params)
)
