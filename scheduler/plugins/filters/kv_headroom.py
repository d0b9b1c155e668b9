"""``kv-headroom-filter`` (GPUStack resource-fit policy): keep endpoints with KV room for the prompt.

For each endpoint that reports its cache configuration (``block_size`` and ``num_gpu_blocks``)::

    free_blocks   = num_gpu_blocks - num_gpu_blocks * kv_cache_usage
    uncached      = max(0, prompt_tokens - cached_tokens(endpoint))
    needed_blocks = ceil(uncached / block_size) + ceil(reserveFraction * num_gpu_blocks)
    keep when free_blocks >= needed_blocks

``prompt_tokens`` is ``request.token_estimate`` (or ``len(prompt_text) / 4`` when it is 0);
``cached_tokens`` comes from the cycle's prefix match (``prefix-cache-scorer``; 0 without one), so a
long prompt whose prefix the endpoint already holds still fits. The reserve keeps room for the
decode growth of the requests already running there.

Endpoints without cache configuration always pass. If no endpoint fits, every endpoint is kept
(the server will queue or preempt; leave the choice to the scorers rather than fail the request).

Parameters: ``reserveFraction`` (0 <= x < 1, default 0.05). Pure; order kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.prefix.match import PrefixMatch, prefix_match
from scheduler.types import EndpointView, LLMRequest

__all__ = ["KvHeadroomFilter", "KvHeadroomParams", "factory", "prompt_tokens"]


@dataclass(frozen=True, slots=True)
class KvHeadroomParams:
    reserve_fraction: float = param(0.05, ge=0, lt=1)


def prompt_tokens(request: LLMRequest) -> int:
    """The request's prompt length in tokens (the estimate, else 4 characters per token)."""
    return request.token_estimate or len(request.prompt_text) // 4


class KvHeadroomFilter(PluginBase):
    plugin_type = "kv-headroom-filter"

    def __init__(self, name: str, params: KvHeadroomParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or KvHeadroomParams()
        self._reserve = params.reserve_fraction

    def _room(
        self, endpoint: EndpointView, tokens: int, match: PrefixMatch | None
    ) -> tuple[float, int] | None:
        """(free blocks, needed blocks), or None when the endpoint has no cache configuration."""
        m = endpoint.metrics
        block_size, total = m.block_size, m.num_gpu_blocks
        if not block_size or not total:
            return None
        cached = match.cached_tokens(endpoint.address) if match is not None else 0
        uncached = max(0, tokens - cached)
        needed = -(-uncached // block_size) + math.ceil(self._reserve * total)
        return total - total * m.kv_cache_usage, needed

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        tokens = prompt_tokens(request)
        match = prefix_match(cycle)
        kept = []
        for e in endpoints:
            room = self._room(e, tokens, match)
            if room is None or room[0] >= room[1]:
                kept.append(e)
        return kept or endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        room = self._room(endpoint, prompt_tokens(request), prefix_match(cycle))
        if room is None:
            return "no cache configuration"
        return f"KV headroom {room[0]:.0f} free blocks < {room[1]} needed"


factory = factory_with_params(
    KvHeadroomFilter.plugin_type,
    KvHeadroomParams,
    lambda name, params, handle: KvHeadroomFilter(name, params),
)
