"""``prefix-cache-affinity-filter`` (llm-d): keep the endpoints that hold most of the prompt's prefix.

Reads the cycle's prefix match (``prefix-cache-scorer``). Keeps the *sticky* endpoints, those whose
prefix score (``matched_blocks / total_blocks``) is at least ``affinityThreshold``, so that the
scorers after it balance load only among cache-warm endpoints. Everything is kept when:

* no endpoint is sticky, the prompt has no full block, or no prefix match exists;
* the request is an *exploration* request, with probability ``explorationProbability``: other
  endpoints warm up for a hot prefix instead of one endpoint owning it forever. Decided per request
  id by a seeded hash (``xxh64(request_id, seed) / 2**64 < p``, the seed drawn once from the
  plugin's random source), so the filter stays pure and runs are reproducible under a seed;
* the TTFT load gate breaks stickiness: with estimated time to first token per endpoint ::

      ttft(e) = (inflight_tokens(e) + uncached_prompt_tokens(e)) / peakPrefillThroughput * 1000  [ms]

  if ``min(ttft over sticky) - min(ttft over the others) > maxTTFTPenaltyMs`` the sticky endpoints
  are overloaded and every endpoint is kept (``maxTTFTPenaltyMs: 0`` disables the gate).
  ``inflight_tokens`` is this plugin's own accounting (prompt token estimates of requests dispatched
  to the endpoint, as the first target of any routed profile, until completion or
  ``requestTimeout``); ``uncached_prompt_tokens`` is the request's prompt tokens minus those the
  endpoint holds according to the prefix match.

Parameters (llm-d names): ``affinityThreshold`` (0 < x <= 1, default 0.80),
``explorationProbability`` (0 <= p <= 1, default 0.01; llm-d's default is 0), ``maxTTFTPenaltyMs``
(>= 0, default 18000), ``peakPrefillThroughput`` (tokens/s > 0, default 15928, llm-d's H100
calibration), ``ttftSource`` (``prefillThroughput``, or ``latencyPredictor``: ``ttft(e)`` is the
``predicted-latency-producer``'s predicted TTFT, named by ``latencyPredictionInfoProducerName``, and the
gate is skipped while the model has no predictions), ``requestTimeout`` (duration, ``"2m"``),
``prefixMatchInfoProducerName`` (llm-d-router's: the producer whose match is read, see
:mod:`scheduler.plugins.prefix.consumer`), ``inFlightLoadProducerName`` (llm-d-router's: with the gate
on, read that ``inflight-load-producer``'s tokens, and then ``ttft`` counts in-flight tokens only, as
upstream; injected under ``llm-d.ai/v1alpha1`` unless ``requestTimeout`` is given). Order kept.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

from scheduler.cycle_state import CycleState
from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.interfaces import Handle, Plugin
from scheduler.params import param, parse_params
from scheduler.plugins.base import PluginBase
from scheduler.plugins.filters.kv_headroom import prompt_tokens
from scheduler.plugins.latency.consumer import LatencyInfoConsumer
from scheduler.plugins.latency.producer import LATENCY_PREDICTION_INFO
from scheduler.plugins.prefix.consumer import PrefixMatchConsumer
from scheduler.plugins.prefix.match import PrefixMatch
from scheduler.plugins.shared.inflight import InflightTracker
from scheduler.plugins.shared.inflight_consumer import InflightLoadConsumer, check_own_tracking
from scheduler.plugins.shared.inflight_hooks import InflightHooks
from scheduler.plugins.shared.inflight_load import INFLIGHT_LOAD
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest

__all__ = ["PrefixAffinityFilter", "PrefixAffinityParams", "factory"]

_TWO_64 = float(2**64)


@dataclass(frozen=True, slots=True)
class PrefixAffinityParams:
    affinity_threshold: float = param(0.80, gt=0, le=1)
    exploration_probability: float = param(0.01, ge=0, le=1)
    max_ttft_penalty_ms: float = param(18000.0, ge=0, key="maxTTFTPenaltyMs")
    peak_prefill_throughput: float = param(15928.0, gt=0)
    ttft_source: str = param(
        "prefillThroughput", choices=("prefillThroughput", "latencyPredictor"), key="ttftSource"
    )
    request_timeout: float = param(120.0, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0")
    prefix_match_info_producer_name: str = ""
    in_flight_load_producer_name: str = ""
    latency_prediction_info_producer_name: str = ""


class PrefixAffinityFilter(
    PrefixMatchConsumer, InflightLoadConsumer, LatencyInfoConsumer, InflightHooks, PluginBase
):
    plugin_type = "prefix-cache-affinity-filter"
    count_every_profile = True

    def __init__(
        self,
        name: str,
        rng: random.Random,
        clock: Callable[[], float],
        params: PrefixAffinityParams | None = None,
    ) -> None:
        super().__init__(name)
        self.params = params = params or PrefixAffinityParams()
        self.producer_name = params.prefix_match_info_producer_name
        self.inflight_producer_name = params.in_flight_load_producer_name
        self.latency_producer_name = params.latency_prediction_info_producer_name
        self._predicted = params.ttft_source == "latencyPredictor"
        self._threshold = params.affinity_threshold
        self._explore = params.exploration_probability
        self._penalty_ms = params.max_ttft_penalty_ms
        self._ms_per_token = 1000.0 / params.peak_prefill_throughput
        self._seed = rng.getrandbits(64)
        self.tracker = InflightTracker(clock, params.request_timeout)

    def explores(self, request: LLMRequest) -> bool:
        """Whether ``request`` is an exploration request (skips the filter)."""
        return xxhash.xxh64_intdigest(request.request_id.encode(), self._seed) / _TWO_64 < self._explore

    def data_needs(self) -> Sequence[DataNeed]:
        """The prefix match, and (with the TTFT gate on) an inflight-load-producer's tokens."""
        needs = list(PrefixMatchConsumer.data_needs(self))
        if self._penalty_ms > 0:
            needs.extend(self.latency_needs() if self._predicted else InflightLoadConsumer.data_needs(self))
        return needs

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if key.startswith(f"{LATENCY_PREDICTION_INFO}/"):
            self.bind_latency_producer(producer)
        elif key.startswith(f"{INFLIGHT_LOAD}/"):
            InflightLoadConsumer.bind_producer(self, key, producer)
        else:
            PrefixMatchConsumer.bind_producer(self, key, producer)

    def _inflight_tokens(self) -> dict[str, int]:
        producer = self.inflight_producer
        return producer.token_counts if producer is not None else self.tracker.token_counts

    def ttft_ms(self, request: LLMRequest, endpoint: EndpointView, match: PrefixMatch) -> float:
        """Estimated time to first token on ``endpoint`` (ms), from in-flight and uncached tokens."""
        uncached = 0 if self.inflight_producer is not None else self._uncached(request, endpoint, match)
        return (self._inflight_tokens().get(endpoint.address, 0) + uncached) * self._ms_per_token

    @staticmethod
    def _uncached(request: LLMRequest, endpoint: EndpointView, match: PrefixMatch) -> int:
        return max(0, prompt_tokens(request) - match.cached_tokens(endpoint.address))

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        match = self.prefix_match_for(cycle, request)
        if match is None or not match.hashes or self.explores(request):
            return endpoints
        threshold = self._threshold
        score = match.score
        is_sticky = [score(e.address) >= threshold for e in endpoints]
        sticky = [e for e, keep in zip(endpoints, is_sticky, strict=True) if keep]
        if not sticky or len(sticky) == len(endpoints):
            return endpoints
        if self._penalty_ms > 0.0 and self._predicted:
            infos = self.latency_info(cycle, request, endpoints)
            if infos is not None:
                ttft = [infos[e.address].ttft if e.address in infos else 0.0 for e in endpoints]
                best_sticky = min(t for t, keep in zip(ttft, is_sticky, strict=True) if keep)
                best_other = min(t for t, keep in zip(ttft, is_sticky, strict=True) if not keep)
                if best_sticky - best_other > self._penalty_ms:
                    return endpoints
        elif self._penalty_ms > 0.0:
            inflight, ms = self._inflight_tokens(), self._ms_per_token
            if self.inflight_producer is not None:  # llm-d-router: in-flight tokens only
                ttft = [inflight.get(e.address, 0) * ms for e in endpoints]
            else:
                prompt, cached = prompt_tokens(request), match.cached_tokens
                ttft = [
                    (inflight.get(a, 0) + max(0, prompt - cached(a))) * ms
                    for a in (e.address for e in endpoints)
                ]
            best_sticky = min(t for t, keep in zip(ttft, is_sticky, strict=True) if keep)
            best_other = min(t for t, keep in zip(ttft, is_sticky, strict=True) if not keep)
            if best_sticky - best_other > self._penalty_ms:
                return endpoints
        return sticky

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        match = self.prefix_match_for(cycle, request)
        score = match.score(endpoint.address) if match is not None else 0.0
        return f"prefix score {score:.2f} < affinityThreshold {self._threshold:.2f}"

    def dispatch_tokens(self, request: LLMRequest) -> int:
        return prompt_tokens(request)


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> PrefixAffinityFilter:
    params = parse_params(PrefixAffinityParams, parameters, PrefixAffinityFilter.plugin_type, name)
    plugin = PrefixAffinityFilter(name, handle.rng(name), handle.clock, params)
    plugin.own_tracking = check_own_tracking(PrefixAffinityFilter.plugin_type, name, parameters)
    return plugin
