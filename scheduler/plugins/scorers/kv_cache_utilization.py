"""``kv-cache-utilization-scorer``: prefer endpoints with more free KV cache.

Formula: ``score(e) = 1 - kv_cache_usage(e)``, clamped into [0, 1] (usage is a fraction in [0, 1]).

Parameters: none. Pure; O(n).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["KVCacheUtilizationScorer", "factory"]


class KVCacheUtilizationScorer(PluginBase):
    plugin_type = "kv-cache-utilization-scorer"

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        return [min(1.0, max(0.0, 1.0 - e.metrics.kv_cache_usage)) for e in endpoints]


def _build(name: str, handle: Handle) -> KVCacheUtilizationScorer:
    return KVCacheUtilizationScorer(name)


factory = factory_without_params(KVCacheUtilizationScorer.plugin_type, _build)
