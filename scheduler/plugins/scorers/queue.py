"""``queue-scorer``: prefer endpoints with a shorter waiting queue.

Formula (min-max normalised over the candidates of this cycle), with q = waiting_queue_size::

    score(e) = (max_q - q(e)) / (max_q - min_q)      1.0 for every endpoint when max_q == min_q

Parameters: none. Pure; O(n).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.plugins.scorers.normalize import lower_is_better
from scheduler.types import EndpointView, LLMRequest

__all__ = ["QueueScorer", "factory"]


class QueueScorer(PluginBase):
    plugin_type = "queue-scorer"

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        return lower_is_better([e.metrics.waiting_queue_size for e in endpoints])


def _build(name: str, handle: Handle) -> QueueScorer:
    return QueueScorer(name)


factory = factory_without_params(QueueScorer.plugin_type, _build)
