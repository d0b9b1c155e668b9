"""``ready-filter`` (GPUStack status policy): keep endpoints that can take a request now.

An endpoint passes when all hold:

* ``endpoint.ready`` is true (the data layer clears it while the server starts, drains or fails);
* it is not draining: attribute ``draining`` (set by a data-layer plugin) is absent or false;
* its metrics are fresh: ``cycle.now - metrics.updated_at <= metricsStalenessThreshold``
  (``updated_at == 0`` means never scraped, which is stale).

Parameters: ``metricsStalenessThreshold`` (duration, default ``"2s"``, the same default as the
``--metrics-staleness-threshold`` flag; ``null`` disables the freshness check). Pure; order kept.
Unlike the saturation detectors it has no fallback: if nothing passes, the profile fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["DRAINING_ATTRIBUTE", "ReadyFilter", "ReadyParams", "factory"]

DRAINING_ATTRIBUTE = "draining"


@dataclass(frozen=True, slots=True)
class ReadyParams:
    metrics_staleness_threshold: float | None = param(
        2.0, ge=0, convert=parse_duration, expect=DURATION_EXPECT + " >= 0, or null"
    )


class ReadyFilter(PluginBase):
    plugin_type = "ready-filter"

    def __init__(self, name: str, params: ReadyParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or ReadyParams()
        self._max_age = params.metrics_staleness_threshold

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        max_age = self._max_age
        now = cycle.now
        out = []
        for e in endpoints:
            if not e.ready or e.attributes.get(DRAINING_ATTRIBUTE):
                continue
            if max_age is not None:
                updated = e.metrics.updated_at
                if updated <= 0.0 or now - updated > max_age:
                    continue
            out.append(e)
        return out

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        if not endpoint.ready:
            return "not ready"
        if endpoint.attributes.get(DRAINING_ATTRIBUTE):
            return "draining"
        updated = endpoint.metrics.updated_at
        if updated <= 0.0:
            return "metrics never scraped"
        return f"metrics stale: {cycle.now - updated:.3f} s old > {self._max_age} s"


factory = factory_with_params(
    ReadyFilter.plugin_type, ReadyParams, lambda name, params, handle: ReadyFilter(name, params)
)
