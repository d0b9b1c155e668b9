"""``p2p-source-producer`` (llm-d): name a peer to pull cached KV blocks from instead of recomputing.

Sets request header ``x-kv-cache-source-host-port: <ip:port>`` for the routing sidecar (vLLM's
OffloadingConnector with a p2p tier pulls the blocks from that peer). From the cycle's prefix match
(``prefix-cache-scorer``'s, :func:`~scheduler.plugins.prefix.match.prefix_match`):

1. sources = endpoints of the snapshot holding any prompt block; ``max`` = the most cached tokens;
2. the band = sources within one block of ``max`` (``cached + block_size >= max``), each weighted
   ``1 / (1 + waiting_queue)``; one is drawn with ``fnv32a(request_id) / 2^32`` as the sampling
   coordinate (deterministic per request, spreads pulls over replicas of a popular prefix);
3. after scheduling, the computing endpoint is the first target of ``prefillProfileName`` when it
   ran, else of the primary profile; the header is set only when the source differs from it and
   holds at least ``minCachedTokenDelta`` more cached tokens.

Without a prefix match (no prefix-cache-scorer configured) no header is set. llm-d counts only
CPU-tier blocks when its producer reports tiers; the index here has no tiers, so every cached
block counts (llm-d's behaviour without tier data).

Parameters (llm-d's): ``minCachedTokenDelta`` (int >= 1, default 1), ``prefillProfileName``
(default ``prefill``; empty means the default), ``prefixMatchInfoProducerName`` (optional: must
name a plugin of the configuration that prepares the prefix match; the match read is the cycle's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from scheduler.cycle_state import CycleState, StateKey
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, PrepareHook
from scheduler.params import param, plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.prefix.match import PrefixMatch, prefix_match
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = [
    "KV_CACHE_SOURCE_HEADER",
    "P2PSourceParams",
    "P2PSourceProducer",
    "choose_source",
    "factory",
    "fnv32a",
]

PLUGIN_TYPE = "p2p-source-producer"
KV_CACHE_SOURCE_HEADER = "x-kv-cache-source-host-port"


def fnv32a(text: str) -> int:
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def choose_source(
    match: PrefixMatch, endpoints: Sequence[EndpointView], request_id: str
) -> tuple[str, int] | None:
    """(address, cached tokens) of the source drawn for ``request_id``; None when nothing is cached."""
    block = match.block_size_tokens
    cached = [(e, match.cached_tokens(e.address)) for e in endpoints]
    cached = [(e, n) for e, n in cached if n > 0]
    if not cached:
        return None
    most = max(n for _, n in cached)
    band = [(e, n, 1.0 / (1.0 + e.metrics.waiting_queue_size)) for e, n in cached if n + block >= most]
    target = fnv32a(request_id) / float(1 << 32) * sum(w for _, _, w in band)
    chosen = band[-1]
    for entry in band:
        if target < entry[2]:
            chosen = entry
            break
        target -= entry[2]
    return chosen[0].address, chosen[1]


@dataclass(frozen=True, slots=True)
class P2PSourceParams:
    min_cached_token_delta: int = param(1, ge=1)
    prefill_profile_name: str = param("prefill")
    prefix_match_info_producer_name: str = param("")


class P2PSourceProducer(PluginBase):
    plugin_type = PLUGIN_TYPE
    owned_request_headers: ClassVar[frozenset[str]] = frozenset({KV_CACHE_SOURCE_HEADER})

    def __init__(self, name: str, params: P2PSourceParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or P2PSourceParams()
        self._delta = params.min_cached_token_delta
        self._prefill = params.prefill_profile_name or "prefill"
        self._snapshot = StateKey[Sequence[EndpointView]](f"{PLUGIN_TYPE}/{name}/snapshot")

    def prepare(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> None:
        cycle.write(self._snapshot, endpoints)  # the candidates of the source draw

    def request_headers(
        self, cycle: CycleState, request: LLMRequest, result: SchedulingResult
    ) -> Mapping[str, str]:
        match = prefix_match(cycle)
        endpoints = cycle.read(self._snapshot)
        if match is None or not endpoints:
            return {}
        source = choose_source(match, endpoints, request.request_id)
        if source is None:
            return {}
        computing = result.profile_results.get(self._prefill)
        if computing is None or not computing.targets:
            computing = result.profile_results.get(result.primary_profile)
        if computing is None or not computing.targets:
            return {}
        computing_address = computing.targets[0].endpoint.address
        address, cached = source
        if address == computing_address or cached - match.cached_tokens(computing_address) < self._delta:
            return {}
        return {KV_CACHE_SOURCE_HEADER: address}


def factory(name: str, parameters: Mapping[str, object], handle: Handle) -> P2PSourceProducer:
    from scheduler.params import parse_params

    params = parse_params(P2PSourceParams, parameters, PLUGIN_TYPE, name)
    producer = params.prefix_match_info_producer_name
    if producer:
        where = f"{plugin_location(PLUGIN_TYPE, name)}: parameters.prefixMatchInfoProducerName"
        try:
            plugin = handle.plugin(producer)
        except KeyError:
            raise ConfigError(f"no plugin named {producer!r} in the configuration", location=where) from None
        if not isinstance(plugin, PrepareHook):
            raise ConfigError(
                f"plugin {producer!r} ({plugin.plugin_type}) does not prepare a prefix match", location=where
            )
    return P2PSourceProducer(name, params)
