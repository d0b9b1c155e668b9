"""``slo-headroom-tier-filter`` (llm-d-router): keep the endpoints predicted to meet the request's SLO.

Splits the candidates by the ``predicted-latency-producer``'s predictions: *positive* (TTFT and TPOT
headroom >= 0) and *negative* (either < 0, or no prediction). Both tiers present: the positive tier
is kept, except for a fraction ``epsilonExploreNeg`` of requests that keep the negative tier, so an
endpoint recovering from overload is re-evaluated. One tier: kept. No predictions at all (cold
model): everything is kept. Without SLO headers every headroom is negative, so the filter keeps all.

The exploration draw is a seeded hash of the request id (``xxh64(request_id, seed) / 2**64 <
epsilonExploreNeg``, the seed drawn once from the plugin's random source), so the filter stays pure.

Parameters (upstream's): ``epsilonExploreNeg`` (0 <= p <= 1, 0.01),
``latencyPredictionInfoProducerName`` (""). Order kept.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle, Plugin
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.latency.consumer import LatencyInfoConsumer
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest

__all__ = ["SloHeadroomTierFilter", "SloHeadroomTierParams", "factory"]

_TWO_64 = float(2**64)


@dataclass(frozen=True, slots=True)
class SloHeadroomTierParams:
    epsilon_explore_neg: float = param(0.01, ge=0, le=1)
    latency_prediction_info_producer_name: str = ""


class SloHeadroomTierFilter(LatencyInfoConsumer, PluginBase):
    params: SloHeadroomTierParams
    plugin_type = "slo-headroom-tier-filter"

    def __init__(self, name: str, rng: random.Random, params: SloHeadroomTierParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or SloHeadroomTierParams()
        self.latency_producer_name = params.latency_prediction_info_producer_name
        self._seed = rng.getrandbits(64)

    def data_needs(self) -> Sequence[DataNeed]:
        return self.latency_needs()

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        self.bind_latency_producer(producer)

    def explores(self, request: LLMRequest) -> bool:
        """Whether ``request`` keeps the negative tier when both tiers exist."""
        draw = xxhash.xxh64_intdigest(request.request_id.encode(), self._seed) / _TWO_64
        return bool(draw < self.params.epsilon_explore_neg)

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        if len(endpoints) <= 1:
            return endpoints
        infos = self.latency_info(cycle, request, endpoints)
        if not infos:
            return endpoints
        positive: list[EndpointView] = []
        negative: list[EndpointView] = []
        for e in endpoints:
            info = infos.get(e.address)
            ok = info is not None and info.ttft_headroom >= 0 and info.tpot_headroom >= 0
            (positive if ok else negative).append(e)
        if positive and negative:
            return negative if self.explores(request) else positive
        return endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        infos = self.latency_info(cycle, request, (endpoint,)) or {}
        info = infos.get(endpoint.address)
        if info is None:
            return "no latency prediction"
        if info.ttft_headroom >= 0 and info.tpot_headroom >= 0:
            return "meets the SLO (negative tier explored)"
        return f"SLO headroom ttft {info.ttft_headroom:.1f} ms, tpot {info.tpot_headroom:.1f} ms"


def _build(name: str, params: SloHeadroomTierParams, handle: Handle) -> SloHeadroomTierFilter:
    return SloHeadroomTierFilter(name, handle.rng(name), params)


factory = factory_with_params(SloHeadroomTierFilter.plugin_type, SloHeadroomTierParams, _build)
