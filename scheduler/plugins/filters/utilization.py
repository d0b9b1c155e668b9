"""``utilization-filter`` (llm-d): drop endpoints over any configured utilization cap.

Each of ``conditions`` caps one metric: an endpoint is kept only when every metric is at most its
``maxValue`` (so several conditions drop an endpoint that breaks any one of them). Metrics:

* ``active-requests``: requests this picker dispatched to the endpoint and has not seen complete
  (its own accounting from the lifecycle hooks, first target of every routed profile, like llm-d's
  ``inflight-load-producer``; entries whose completion never arrives expire after 2 minutes);
* ``running-requests``, ``waiting-queue``: as scraped from the model server;
* ``kv-cache-utilization``: the scraped KV-cache usage fraction (0-1).

If nothing is left and ``fallbackOnEmpty`` is true, every candidate is kept.

Parameters (llm-d's): ``conditions`` (required, at least one ``{metric, maxValue}``; ``maxValue``
>= 0 and, for ``kv-cache-utilization``, <= 1), ``fallbackOnEmpty`` (default false). llm-d's
``inFlightLoadProducerName`` (which producer instance to read) is not accepted: the counts are
this plugin's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.params import REQUIRED, param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.shared.inflight import InflightTracker
from scheduler.plugins.shared.inflight_hooks import InflightHooks
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = ["METRICS", "UtilizationFilter", "UtilizationFilterParams", "factory"]

ACTIVE = "active-requests"
RUNNING = "running-requests"
WAITING = "waiting-queue"
KV = "kv-cache-utilization"
METRICS = (ACTIVE, RUNNING, WAITING, KV)
_TIMEOUT = 120.0


def _conditions(raw: Any) -> tuple[tuple[str, float], ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError("utilization filter requires at least one condition")
    out: list[tuple[str, float]] = []
    for i, cond in enumerate(raw):
        if not isinstance(cond, Mapping) or set(cond) - {"metric", "maxValue"}:
            raise ValueError(f"conditions[{i}]: expected {{metric, maxValue}}")
        metric, cap = cond.get("metric"), cond.get("maxValue")
        if metric not in METRICS:
            raise ValueError(f"conditions[{i}].metric: expected one of {', '.join(METRICS)}, got {metric!r}")
        if cap is None:
            raise ValueError(f"conditions[{i}]: the condition for {metric!r} requires maxValue")
        if isinstance(cap, bool) or not isinstance(cap, int | float) or cap < 0:
            raise ValueError(f"conditions[{i}].maxValue: expected a number >= 0, got {cap!r}")
        if metric == KV and cap > 1:
            raise ValueError(f"conditions[{i}].maxValue: {KV} is a fraction and must be at most 1, got {cap}")
        out.append((metric, float(cap)))
    return tuple(out)


def _render_conditions(value: tuple[tuple[str, float], ...]) -> list[dict[str, Any]]:
    return [{"metric": metric, "maxValue": cap} for metric, cap in value]


@dataclass(frozen=True, slots=True)
class UtilizationFilterParams:
    conditions: tuple[tuple[str, float], ...] = param(
        REQUIRED,
        convert=_conditions,
        expect="a non-empty list of {metric, maxValue}",
        render=_render_conditions,
    )
    fallback_on_empty: bool = False


class UtilizationFilter(InflightHooks, PluginBase):
    plugin_type = "utilization-filter"
    count_every_profile = True

    def __init__(
        self, name: str, params: UtilizationFilterParams, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(name)
        self.params = params
        self.tracker = InflightTracker(clock, _TIMEOUT)
        self._conditions = params.conditions
        self._fallback = params.fallback_on_empty
        self._counts_active = any(metric == ACTIVE for metric, _ in params.conditions)

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        if self._counts_active:
            super().on_dispatched(request, result)

    def _value(self, metric: str, endpoint: EndpointView) -> float:
        if metric == ACTIVE:
            return float(self.tracker.requests(endpoint.address))
        m = endpoint.metrics
        if metric == RUNNING:
            return float(m.running_requests)
        if metric == WAITING:
            return float(m.waiting_queue_size)
        return m.kv_cache_usage

    def _over(self, endpoint: EndpointView) -> str | None:
        for metric, cap in self._conditions:
            value = self._value(metric, endpoint)
            if value > cap:
                return f"{metric} {value:g} > {cap:g}"
        return None

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        kept = [e for e in endpoints if self._over(e) is None]
        if not kept and self._fallback:
            return endpoints
        return kept

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return self._over(endpoint) or "over a utilization cap"


def _build(name: str, params: UtilizationFilterParams, handle: Handle) -> UtilizationFilter:
    return UtilizationFilter(name, params, handle.clock)


factory = factory_with_params(UtilizationFilter.plugin_type, UtilizationFilterParams, _build)
