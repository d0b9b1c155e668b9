"""``utilization-detector`` (GIE): pool saturation from scraped queue depth and KV-cache usage.

Per endpoint, with ``qT`` = ``queueDepthThreshold`` and ``kvT`` = ``kvCacheUtilThreshold``::

    stale      = updated_at <= 0 or now - updated_at > metricsStalenessThreshold
    saturated  = stale or waiting_queue_size >= qT or kv_cache_usage >= kvT
    load       = 1.0 if stale else min(1, max(waiting_queue_size / qT, kv_cache_usage / kvT))

Pool: ``saturation = mean(load)`` over the endpoints (1.0 for an empty pool), and
``is_saturated`` is true when every endpoint is saturated, which is exactly ``saturation >= 1``.
GIE averages the uncapped ratios; we cap each endpoint at 1 so that one overloaded endpoint cannot
hide free capacity elsewhere, which is what makes the two definitions agree.

As a filter it drops stale endpoints and those at or over the relaxed limits
``qT * (1 + headroom)`` / ``kvT * (1 + headroom)``; if that would drop every endpoint it returns the
input unchanged (shedding is the admission layer's decision, not the filter's).

Parameters (GIE names and defaults): ``queueDepthThreshold`` (int >= 1, 5),
``kvCacheUtilThreshold`` (0 < x <= 1, 0.8), ``metricsStalenessThreshold`` (duration, ``"200ms"``:
GIE's default, four missed scrapes at the default 50 ms refresh interval; set it to ``"2s"`` to match
``--metrics-staleness-threshold`` when scraping less often), ``headroom`` (>= 0, 0.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from scheduler.cycle_state import CycleState
from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.interfaces import Filter, SaturationDetector
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["UtilizationDetector", "UtilizationParams", "factory"]


@dataclass(frozen=True, slots=True)
class UtilizationParams:
    queue_depth_threshold: int = param(5, ge=1)
    kv_cache_util_threshold: float = param(0.8, gt=0, le=1)
    metrics_staleness_threshold: float = param(
        0.2, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0"
    )
    headroom: float = param(0.0, ge=0)


class UtilizationDetector(PluginBase):
    plugin_type = "utilization-detector"
    plugin_roles: ClassVar[tuple[type, ...]] = (Filter, SaturationDetector)  # scheduler.roles

    def __init__(self, name: str, params: UtilizationParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or UtilizationParams()
        self._q = params.queue_depth_threshold
        self._kv = params.kv_cache_util_threshold
        self._max_age = params.metrics_staleness_threshold
        self._q_limit = params.queue_depth_threshold * (1.0 + params.headroom)
        self._kv_limit = params.kv_cache_util_threshold * (1.0 + params.headroom)

    def _stale(self, endpoint: EndpointView, now: float) -> bool:
        updated = endpoint.metrics.updated_at
        return updated <= 0.0 or now - updated > self._max_age

    def stale_count(self, endpoints: Sequence[EndpointView], now: float) -> int:
        """How many of ``endpoints`` have missing or stale metrics (they count as fully saturated)."""
        return sum(1 for e in endpoints if self._stale(e, now))

    def load(self, endpoint: EndpointView, now: float) -> float:
        """This endpoint's saturation in [0, 1] (1.0 when its metrics are stale)."""
        if self._stale(endpoint, now):
            return 1.0
        m = endpoint.metrics
        return min(1.0, max(m.waiting_queue_size / self._q, m.kv_cache_usage / self._kv))

    def saturation(self, endpoints: Sequence[EndpointView], now: float) -> float:
        if not endpoints:
            return 1.0
        return sum(self.load(e, now) for e in endpoints) / len(endpoints)

    def is_saturated(self, endpoints: Sequence[EndpointView], now: float) -> bool:
        q, kv = self._q, self._kv
        for e in endpoints:
            m = e.metrics
            if not self._stale(e, now) and m.waiting_queue_size < q and m.kv_cache_usage < kv:
                return False
        return True

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        now, q_limit, kv_limit = cycle.now, self._q_limit, self._kv_limit
        kept = [
            e
            for e in endpoints
            if not self._stale(e, now)
            and e.metrics.waiting_queue_size < q_limit
            and e.metrics.kv_cache_usage < kv_limit
        ]
        return kept or endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        if self._stale(endpoint, cycle.now):
            return "metrics stale"
        m = endpoint.metrics
        if m.waiting_queue_size >= self._q_limit:
            return f"queue {m.waiting_queue_size} >= {self._q_limit:g}"
        return f"KV cache usage {m.kv_cache_usage:.2f} >= {self._kv_limit:.2f}"


factory = factory_with_params(
    UtilizationDetector.plugin_type,
    UtilizationParams,
    lambda name, params, handle: UtilizationDetector(name, params),
)
