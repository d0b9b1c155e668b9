"""``prefix-cache-affinity-filter``: keep the endpoints that hold most of the prompt's prefix.

Reads the cycle's prefix match (``prefix-cache-scorer``). Keeps endpoints whose prefix score
(``matched_blocks / total_blocks``) is at least ``affinityThreshold``, so that the scorers after it
balance load only among cache-warm endpoints. Everything is kept (no filtering) when:

* no endpoint reaches the threshold, the prompt has no full block, or no prefix match exists;
* the request is an *exploration* request, with probability ``explorationProbability``: this lets
  other endpoints warm up for a hot prefix instead of one endpoint owning it forever.

Exploration is decided per request id by a seeded hash (``xxh64(request_id, seed) / 2**64 < p``,
the seed drawn once from the plugin's random source), so the filter stays pure and deterministic:
the same request always gets the same answer, and runs are reproducible under a scheduler seed.

Parameters: ``affinityThreshold`` (0 < x <= 1, default 0.80), ``explorationProbability``
(0 <= p <= 1, default 0.01). Order kept.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

from scheduler.cycle_state import CycleState
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.prefix.match import prefix_match
from scheduler.types import EndpointView, LLMRequest

__all__ = ["PrefixAffinityFilter", "PrefixAffinityParams", "factory"]

_TWO_64 = float(2**64)


@dataclass(frozen=True, slots=True)
class PrefixAffinityParams:
    affinity_threshold: float = param(0.80, gt=0, le=1)
    exploration_probability: float = param(0.01, ge=0, le=1)


class PrefixAffinityFilter(PluginBase):
    plugin_type = "prefix-cache-affinity-filter"

    def __init__(self, name: str, rng: random.Random, params: PrefixAffinityParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or PrefixAffinityParams()
        self._threshold = params.affinity_threshold
        self._explore = params.exploration_probability
        self._seed = rng.getrandbits(64)

    def explores(self, request: LLMRequest) -> bool:
        """Whether ``request`` is an exploration request (skips the filter)."""
        return xxhash.xxh64_intdigest(request.request_id.encode(), self._seed) / _TWO_64 < self._explore

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        match = prefix_match(cycle)
        if match is None or not match.hashes or self.explores(request):
            return endpoints
        threshold = self._threshold
        kept = [e for e in endpoints if match.score(e.address) >= threshold]
        return kept or endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        match = prefix_match(cycle)
        score = match.score(endpoint.address) if match is not None else 0.0
        return f"prefix score {score:.2f} < affinityThreshold {self._threshold:.2f}"


factory = factory_with_params(
    PrefixAffinityFilter.plugin_type,
    PrefixAffinityParams,
    lambda name, params, handle: PrefixAffinityFilter(name, handle.rng(name), params),
)
