"""``running-requests-size-scorer``: fewer running requests is better (min-max normalised).

Input: ``metrics.running_requests`` of each endpoint. Formula, with ``lo``/``hi`` the minimum and
maximum over the candidates::

    score = (hi - running) / (hi - lo)        # all equal -> 1.0

Parameters: none. Pure; one pass over the endpoints.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.plugins.scorers.normalize import lower_is_better
from scheduler.types import EndpointView, LLMRequest

__all__ = ["RunningRequestsSizeScorer", "factory"]


class RunningRequestsSizeScorer(PluginBase):
    plugin_type = "running-requests-size-scorer"

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        return lower_is_better([e.metrics.running_requests for e in endpoints])


factory = factory_without_params(
    RunningRequestsSizeScorer.plugin_type, lambda name, handle: RunningRequestsSizeScorer(name)
)
