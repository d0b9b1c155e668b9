"""``probabilistic-admitter`` (llm-d): shed sheddable requests with a probability that grows with load.

Requests with priority >= 0 are always admitted, and so is every request when there are no
candidates. For a sheddable request (priority < 0)::

    saturation = mean over candidates of max(waiting_queue / queueDepthThreshold,
                                             kv_cache_usage / kvCacheUtilThreshold)
    p_reject   = min(saturation ** power * k, 1)

and the request is rejected (429) when a draw from the plugin's seeded random source is below
``p_reject``. With the defaults (power 5, k 300) shedding is ~2.3% at saturation 0.15 and total at
about 0.34. Unlike ``utilization-detector`` the ratios are not capped per endpoint and stale
metrics are read as they are (llm-d counts only endpoints without metrics as saturated; an endpoint
here always has metrics).

Parameters (llm-d's): ``queueDepthThreshold`` (int > 0, default 5), ``kvCacheUtilThreshold``
(> 0, default 0.8), ``power`` (> 0, default 5), ``k`` (> 0, default 300).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.interfaces import Handle
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["ProbabilisticAdmitter", "ProbabilisticAdmitterParams", "factory"]


@dataclass(frozen=True, slots=True)
class ProbabilisticAdmitterParams:
    queue_depth_threshold: int = param(5, gt=0)
    kv_cache_util_threshold: float = param(0.8, gt=0)
    power: float = param(5.0, gt=0)
    k: float = param(300.0, gt=0)


class ProbabilisticAdmitter(PluginBase):
    plugin_type = "probabilistic-admitter"

    def __init__(self, name: str, params: ProbabilisticAdmitterParams, rng: random.Random) -> None:
        super().__init__(name)
        self.params = params
        self._queue = float(params.queue_depth_threshold)
        self._kv = params.kv_cache_util_threshold
        self._power = params.power
        self._k = params.k
        self._rng = rng

    def saturation(self, endpoints: Sequence[EndpointView]) -> float:
        total = 0.0
        for e in endpoints:
            m = e.metrics
            total += max(m.waiting_queue_size / self._queue, m.kv_cache_usage / self._kv)
        return total / len(endpoints)

    def reject_probability(self, endpoints: Sequence[EndpointView]) -> float:
        scaled: float = self.saturation(endpoints) ** self._power * self._k
        return min(scaled, 1.0)

    def admit(self, request: LLMRequest, endpoints: Sequence[EndpointView]) -> str | None:
        if request.priority >= 0 or not endpoints:
            return None
        probability = self.reject_probability(endpoints)
        if self._rng.random() < probability:
            saturation = self.saturation(endpoints)
            return f"probabilistic-admitter: rejected, saturation={saturation:.3f} prob={probability:.2f}"
        return None


def _build(name: str, params: ProbabilisticAdmitterParams, handle: Handle) -> ProbabilisticAdmitter:
    return ProbabilisticAdmitter(name, params, handle.rng(name))


factory = factory_with_params(ProbabilisticAdmitter.plugin_type, ProbabilisticAdmitterParams, _build)
