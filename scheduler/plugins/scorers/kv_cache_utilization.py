"""``kv-cache-utilization-scorer``: prefer endpoints with more free KV cache.

Formula: ``score(e) = 1 - kv_cache_usage(e)``, clamped into [0, 1] (usage is a fraction in [0, 1];
an unknown, NaN usage scores 0).

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
        out: list[float] = []
        append = out.append
        for e in endpoints:
            usage = e.metrics.kv_cache_usage
            append(1.0 - usage if 0.0 <= usage <= 1.0 else (1.0 if usage < 0.0 else 0.0))  # NaN -> 0
        return out


def _build(name: str, handle: Handle) -> KVCacheUtilizationScorer:
    return KVCacheUtilizationScorer(name)


factory = factory_without_params(KVCacheUtilizationScorer.plugin_type, _build)
