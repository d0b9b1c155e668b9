"""``concurrency-detector`` (GIE): pool saturation from this picker's own in-flight accounting.

Counts come from an :class:`~scheduler.plugins.shared.inflight.InflightTracker` fed by the
lifecycle hooks (dispatch counts the primary endpoint once per request id; completion uncounts it,
idempotently; a proxy-reported fallback moves the count), so they are never stale and react within
the same millisecond, unlike scraped metrics. In ``concurrencyMode: tokens`` the unit is the
request's prompt token estimate instead of one request.

Per endpoint, with ``limit`` = ``maxConcurrency`` (or ``maxTokenConcurrency`` in token mode)::

    load       = min(1, inflight / limit)
    saturated  = inflight >= limit

Pool: ``saturation = mean(load)`` (1.0 for an empty pool); ``is_saturated`` when every endpoint is
saturated (= ``saturation >= 1``; GIE uses the uncapped total ratio, see utilization-detector for
why we cap). As a filter it drops endpoints with ``inflight >= limit * (1 + headroom)`` and returns
the input unchanged if that would drop all of them.

Parameters (GIE names and defaults): ``concurrencyMode`` (``requests`` | ``tokens``, ``requests``),
``maxConcurrency`` (int >= 1, 100), ``maxTokenConcurrency`` (int >= 1, 1,000,000), ``headroom``
(>= 0, 0.0), ``requestTimeout`` (duration, ``"2m"``: entries whose completion never came expire),
``inFlightLoadProducerName`` (llm-d-router: read that ``inflight-load-producer``'s counts instead of
counting here; injected under ``llm-d.ai/v1alpha1`` unless ``requestTimeout`` is given; see
:mod:`scheduler.plugins.shared.inflight_consumer`). In token mode the producer's tokens are the
uncached prompt tokens it tracks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from scheduler.cycle_state import CycleState
from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.interfaces import Filter, Handle, SaturationDetector
from scheduler.params import param, parse_params
from scheduler.plugins.base import PluginBase
from scheduler.plugins.shared.inflight import InflightTracker
from scheduler.plugins.shared.inflight_consumer import InflightLoadConsumer, check_own_tracking
from scheduler.plugins.shared.inflight_hooks import InflightHooks
from scheduler.types import EndpointView, LLMRequest

__all__ = ["ConcurrencyDetector", "ConcurrencyParams", "factory"]


@dataclass(frozen=True, slots=True)
class ConcurrencyParams:
    concurrency_mode: str = param("requests", choices=("requests", "tokens"))
    max_concurrency: int = param(100, ge=1)
    max_token_concurrency: int = param(1_000_000, ge=1)
    headroom: float = param(0.0, ge=0)
    request_timeout: float = param(120.0, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0")
    in_flight_load_producer_name: str = param("")


class ConcurrencyDetector(InflightLoadConsumer, InflightHooks, PluginBase):
    plugin_type = "concurrency-detector"
    plugin_roles: ClassVar[tuple[type, ...]] = (Filter, SaturationDetector)  # scheduler.roles

    def __init__(
        self, name: str, clock: Callable[[], float], params: ConcurrencyParams | None = None
    ) -> None:
        super().__init__(name)
        self.params = params = params or ConcurrencyParams()
        self.tracker = InflightTracker(clock, params.request_timeout)
        self.inflight_producer_name = params.in_flight_load_producer_name
        self._tokens = params.concurrency_mode == "tokens"
        self._limit = params.max_token_concurrency if self._tokens else params.max_concurrency
        self._filter_limit = self._limit * (1.0 + params.headroom)

    def _counts(self) -> dict[str, int]:
        source = self.inflight_producer or self.tracker
        return source.token_counts if self._tokens else source.request_counts

    def saturation(self, endpoints: Sequence[EndpointView], now: float) -> float:
        if not endpoints:
            return 1.0
        counts, limit = self._counts(), self._limit
        return sum(min(1.0, counts.get(e.address, 0) / limit) for e in endpoints) / len(endpoints)

    def is_saturated(self, endpoints: Sequence[EndpointView], now: float) -> bool:
        counts, limit = self._counts(), self._limit
        return all(counts.get(e.address, 0) >= limit for e in endpoints)

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        counts, limit = self._counts(), self._filter_limit
        if not counts:
            return endpoints
        kept = [e for e in endpoints if counts.get(e.address, 0) < limit]
        return kept or endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        unit = "tokens" if self._tokens else "requests"
        return f"{self._counts().get(endpoint.address, 0)} {unit} in flight >= limit {self._filter_limit:g}"

    def dispatch_tokens(self, request: LLMRequest) -> int:
        return request.token_estimate


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> ConcurrencyDetector:
    params = parse_params(ConcurrencyParams, parameters, ConcurrencyDetector.plugin_type, name)
    plugin = ConcurrencyDetector(name, handle.clock, params)
    plugin.own_tracking = check_own_tracking(ConcurrencyDetector.plugin_type, name, parameters)
    return plugin
