"""``precise-prefix-cache-scorer`` (llm-d-inference-scheduler): score endpoints by their exact cached prefix.

``score(e) = min(1, weighted(e) / total_blocks)``: ``weighted(e)`` is the tier-weighted length of the
longest run of the prompt's blocks, from the first, that endpoint ``e`` holds according to its KV
events (GPU blocks weigh 1.0, CPU blocks 0.8 by default: ``indexerConfig.kvCacheBackendConfigs``);
``total_blocks`` is the number of full blocks of the prompt. A prompt shorter than one block, or a
request without token ids, scores 0 everywhere.

It is the self-contained form of ``precise-prefix-cache-producer`` + ``prefix-cache-scorer``
(llm-d-router deprecated it in favour of that pair): the index, the event ingestion, the parameters
and the published prefix match are the producer's (:mod:`scheduler.plugins.precise.producer`), so
``prefix-affinity-scorer`` and the other prefix consumers read its exact match too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.plugins.precise.params import parse_precise_params
from scheduler.plugins.precise.producer import PrecisePrefixCacheProducer
from scheduler.plugins.prefix.scorer import PUBLISHED_PREFIX_MATCH
from scheduler.types import EndpointView, LLMRequest

__all__ = ["PLUGIN_TYPE", "PrecisePrefixCacheScorer", "factory"]

PLUGIN_TYPE = "precise-prefix-cache-scorer"


class PrecisePrefixCacheScorer(PrecisePrefixCacheProducer):
    plugin_type = PLUGIN_TYPE

    def produced_keys(self) -> frozenset[str]:
        """Also the cycle's published match, which other prefix consumers read when they name no producer
        (as a self-contained ``prefix-cache-scorer``'s): no approximate producer is added for them."""
        return super().produced_keys() | {PUBLISHED_PREFIX_MATCH}

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        match = self.match(cycle, request)
        total = match.total_blocks
        weighted = self.weighted(cycle, request)
        if not total or not weighted:
            return [0.0] * len(endpoints)
        return [min(1.0, weighted.get(e.address, 0.0) / total) for e in endpoints]


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> PrecisePrefixCacheScorer:
    return PrecisePrefixCacheScorer(name, parse_precise_params(parameters, PLUGIN_TYPE, name), handle.clock)
