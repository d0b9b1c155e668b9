"""``load-aware-scorer`` (llm-d): penalise waiting queues, linearly up to a threshold.

Input: ``metrics.waiting_queue_size`` (``q``). Formula (llm-d's, so existing weights keep their
meaning)::

    q == 0            -> 0.5
    0 < q             -> 0.5 * (1 - min(q, threshold) / threshold)

A non-empty queue below the threshold therefore scores strictly between 0 and 0.5 (one waiting
request with the default threshold gives 0.5 * 127/128 ~= 0.496), and a queue at or above the
threshold scores 0. The 0.5 ceiling leaves room above it for a future "spare capacity" signal.

Parameters: ``threshold`` (int >= 1, default 128): the queue length that scores 0. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["LoadAwareParams", "LoadAwareScorer", "factory"]


@dataclass(frozen=True, slots=True)
class LoadAwareParams:
    threshold: int = param(128, ge=1)


class LoadAwareScorer(PluginBase):
    plugin_type = "load-aware-scorer"

    def __init__(self, name: str, params: LoadAwareParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or LoadAwareParams()
        self._threshold = params.threshold

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        threshold = self._threshold
        half_step = 0.5 / threshold
        return [0.5 - half_step * min(e.metrics.waiting_queue_size, threshold) for e in endpoints]


factory = factory_with_params(
    LoadAwareScorer.plugin_type, LoadAwareParams, lambda name, params, handle: LoadAwareScorer(name, params)
)
