"""``binpack-scorer`` (GPUStack placement policy): pack work onto the fullest endpoint that still fits.

Keeps the other endpoints cold (their caches stay warm for other work, and an autoscaler can shrink
the pool). With ``load`` and ``capacity`` as in :mod:`scheduler.plugins.scorers.placement`::

    score = load / capacity    if load < capacity     # fuller is better
    score = 0                  otherwise              # does not fit

Parameters: ``load`` (``kv`` | ``queue`` | ``running``, default ``kv``); ``capacity`` (number > 0,
default per load kind). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.scorers.placement import PlacementParams, loads
from scheduler.types import EndpointView, LLMRequest

__all__ = ["BinpackScorer", "factory"]


class BinpackScorer(PluginBase):
    plugin_type = "binpack-scorer"

    def __init__(self, name: str, params: PlacementParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or PlacementParams()
        self._kind = params.load
        self._capacity = params.effective_capacity

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        capacity = self._capacity
        return [load / capacity if 0.0 <= load < capacity else 0.0 for load in loads(self._kind, endpoints)]


factory = factory_with_params(
    BinpackScorer.plugin_type, PlacementParams, lambda name, params, handle: BinpackScorer(name, params)
)
