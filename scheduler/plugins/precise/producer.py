"""``precise-prefix-cache-producer`` (llm-d): each endpoint's cached prefix of a request, from KV events.

The model servers publish what their KV caches hold (vLLM KV events, :mod:`.events`); this plugin
keeps them in an exact index (:mod:`.index`) and computes, per request, how many leading blocks of
the prompt each endpoint holds. The prompt's block keys are vLLM's own block hashes of the request's
token ids (:mod:`.hashing`: the servers' block size, hash algorithm and seed), so a key matches
exactly the block a server announced. Token ids come from a ``token-producer`` (``vllm.url``: the
model server's ``/render`` endpoints, which tokenise as the server does, chat template included), or,
with ``indexerConfig.tokenizersPoolConfig``, from the plugin's own in-process tokenizer
(:mod:`.local_tokenizer`: a local ``tokenizer.json``); then no ``token-producer`` is needed. Like a
render, that tokenisation is done by the EPP before scheduling (in a thread, off the serving loop:
:mod:`epp.server.render`), which hands the ids over with :meth:`PrecisePrefixCacheProducer.accept_tokens`
(at most 1,024 requests wait between the two; the oldest is dropped first). A request without ids
matches nothing.

Per cycle (``prepare``): the match is a :class:`~scheduler.plugins.prefix.match.PrefixMatch`
(``matched`` = consecutive blocks held, any tier) published as ``PrefixCacheMatchInfo/<name>`` for
``prefix-cache-scorer`` (``prefixMatchInfoProducerName``), ``no-hit-lru-scorer`` and the other prefix
consumers, and as the cycle's prefix match when none was published yet (so ``prefix-affinity-scorer``
anchors ownership on the exact keys). :meth:`weighted` adds the tier-weighted length (GPU 1.0, CPU
0.8) for ``precise-prefix-cache-scorer``.

Which endpoints are subscribed (per-endpoint mode): every endpoint the data layer announces whose
labels match ``kvEventsConfig.podDiscoveryConfig.podLabelSelector`` (empty: all); an endpoint updated
to labels that no longer match is unsubscribed and its blocks dropped, as a removed one.

With ``enableMetrics`` each lookup is timed and its best prefix counted (:mod:`.lookup_stats`).

Endpoint identity: events of a per-endpoint subscription are filed under the endpoint's address
(``ip:port``); in central mode under the topic's ``kv@<id>@<model>`` id, which is the address or the
pod IP (then every endpoint of that IP reads it). Removed endpoints' blocks are dropped.

The transport (ZMQ sockets, :mod:`datalayer.kv_events`) is I/O and lives in the data layer: the EPP
attaches it at start-up (:meth:`attach_transport`) and this plugin forwards endpoint lifecycle
events to it (``extract_endpoint``, as an ``endpoint-notification-source`` extractor).
Parameters: :mod:`.params`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from scheduler.cycle_state import CycleState, StateKey
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin
from scheduler.params import plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.precise.events import KVEventIngester
from scheduler.plugins.precise.hashing import BlockKeyer
from scheduler.plugins.precise.index import KVBlockIndex
from scheduler.plugins.precise.local_tokenizer import LocalTokenizer, LocalTokenizerError
from scheduler.plugins.precise.lookup_stats import LookupStats
from scheduler.plugins.precise.params import PreciseParams, parse_precise_params
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.plugins.tokens.producer import TOKENIZED_PROMPT, TokenProducer
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = ["EndpointTransport", "PrecisePrefixCacheProducer", "factory"]

PLUGIN_TYPE = "precise-prefix-cache-producer"
_SPECULATIVE_LIMIT = 4096


class EndpointTransport(Protocol):
    """What the data layer's KV-event transport offers the plugin (see :mod:`datalayer.kv_events`)."""

    def endpoint_added(self, address: str) -> None: ...

    def endpoint_removed(self, address: str) -> None: ...


class _Speculative:
    """Blocks assumed held by a chosen endpoint until its events arrive (``speculativeIndexing``).

    At most ``limit`` requests are remembered (the oldest expire first); each key is reference-counted
    per endpoint, so overlapping requests keep a shared prefix until the last one expires.
    """

    def __init__(self, ttl: float, clock: Callable[[], float], limit: int = _SPECULATIVE_LIMIT) -> None:
        self.ttl = ttl
        self.clock = clock
        self.limit = limit
        self._held: dict[str, dict[int, int]] = {}
        self._queue: deque[tuple[float, str, tuple[int, ...]]] = deque()

    def add(self, address: str, keys: tuple[int, ...]) -> None:
        self.expire()
        if len(self._queue) >= self.limit:
            self._drop(*self._queue.popleft()[1:])
        held = self._held.setdefault(address, {})
        for k in keys:
            held[k] = held.get(k, 0) + 1
        self._queue.append((self.clock() + self.ttl, address, keys))

    def _drop(self, address: str, keys: tuple[int, ...]) -> None:
        held = self._held.get(address)
        if held is None:
            return
        for k in keys:
            n = held.get(k, 0) - 1
            if n > 0:
                held[k] = n
            else:
                held.pop(k, None)
        if not held:
            del self._held[address]

    def expire(self) -> None:
        now = self.clock()
        queue = self._queue
        while queue and queue[0][0] <= now:
            self._drop(*queue.popleft()[1:])

    def blocks(self, address: str, keys: Sequence[int]) -> int:
        held = self._held.get(address)
        if not held:
            return 0
        n = 0
        for k in keys:
            if k not in held:
                break
            n += 1
        return n

    def forget(self, address: str) -> None:
        self._held.pop(address, None)


class PrecisePrefixCacheProducer(PluginBase):
    plugin_type = PLUGIN_TYPE

    def __init__(self, name: str, params: PreciseParams, clock: Callable[[], float]) -> None:
        super().__init__(name)
        self.settings = params
        self.keyer = BlockKeyer(params.hash_algorithm, params.hash_seed, params.block_size)
        self.index = KVBlockIndex(params.max_blocks_per_source, tier_weights=params.tier_weights)
        self.ingester = KVEventIngester(self.index, self.keyer)
        self.token_source: TokenProducer | None = None
        self.transport: EndpointTransport | None = None
        self._speculative = (
            _Speculative(params.speculative_ttl, clock) if params.speculative_indexing else None
        )
        self._key: StateKey[tuple[PrefixMatch, dict[str, float]]] = StateKey(f"{self.plugin_type}/{name}")
        self.lookup_stats = LookupStats() if params.enable_metrics else None
        self._hosts: dict[str, str] = {}
        self._pending: dict[str, tuple[int, ...]] = {}  # request id -> keys, prepare to dispatch (<= 1,024)
        self._addresses: tuple[str, ...] = ()  # the endpoints of the last prepared cycle
        self.local = self._load_tokenizer()
        self._ids_key: StateKey[Sequence[int]] = StateKey(f"{self.plugin_type}/{name}/ids")
        self._handed: dict[str, Sequence[int]] = {}  # request id -> local ids, EPP to prepare (<= 1,024)

    def _load_tokenizer(self) -> LocalTokenizer | None:
        settings = self.settings.tokenizer
        if settings is None:
            return None
        try:
            return LocalTokenizer(settings)
        except LocalTokenizerError as exc:
            where = plugin_location(self.plugin_type, self.name)
            raise ConfigError(
                str(exc), location=f"{where}: parameters.indexerConfig.tokenizersPoolConfig"
            ) from None

    @property
    def tokens_limit(self) -> int:
        """The most ids the keys are computed from (``maxPrefixBlocksToMatch`` full blocks)."""
        return self.settings.block_size * self.settings.max_prefix_blocks

    def accept_tokens(self, request_id: str, token_ids: Sequence[int] | None) -> None:
        """The in-process tokenizer's ids for ``request_id`` (None: none could be computed); kept as given,
        not copied (the tokenizer hands over a fresh list)."""
        handed = self._handed
        if request_id not in handed and len(handed) >= 1024:
            handed.pop(next(iter(handed)))
        handed[request_id] = token_ids or ()

    @property
    def parameters(self) -> dict[str, Any]:
        """The resolved parameters in llm-d's YAML form (what ``epp check-config`` renders)."""
        return self.settings.as_yaml()

    # -- wiring ----------------------------------------------------------------------------------------

    def produced_keys(self) -> frozenset[str]:
        return frozenset({f"PrefixCacheMatchInfo/{self.name}"})

    def data_needs(self) -> tuple[DataNeed, ...]:
        if self.settings.tokenizer is not None:
            return ()  # tokenised in process
        key = f"{TOKENIZED_PROMPT}/{TokenProducer.plugin_type}"
        return (DataNeed(key, "", False, TokenProducer.plugin_type),)

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if isinstance(producer, TokenProducer):
            self.token_source = producer

    def attach_transport(self, transport: EndpointTransport) -> None:
        """Called once by the EPP with the data layer's KV-event transport."""
        self.transport = transport

    def extract_endpoint(self, event: Any) -> None:
        """``endpoint-notification-source`` extractor: (un)subscribe the endpoint's publisher."""
        address = event.endpoint.address
        events = self.settings.events
        per_endpoint = events.discover_pods and not events.zmq_endpoint
        if getattr(event.kind, "value", "") == "delete" or (
            per_endpoint and not events.pod_selector.matches(event.endpoint.labels)
        ):
            self.forget(address)
            if self.transport is not None:
                self.transport.endpoint_removed(address)
        elif self.transport is not None:
            self.transport.endpoint_added(address)

    # -- per cycle -------------------------------------------------------------------------------------

    def keys(self, cycle: CycleState, request: LLMRequest) -> list[int]:
        return self._keys(self._ids(cycle, request), request)

    def _ids(self, cycle: CycleState, request: LLMRequest) -> Sequence[int]:
        if self.local is not None:
            found = cycle.read(self._ids_key)
            if found is None:
                found = self._handed.pop(request.request_id, ())
                cycle.write(self._ids_key, found)
            return found
        source = self.token_source
        return (source.tokens(cycle, request) if source is not None else None) or ()

    def _keys(self, ids: Sequence[int], request: LLMRequest) -> list[int]:
        if not ids:
            return []
        return self.keyer.keys(ids, request.adapter, request.cache_salt, self.settings.max_prefix_blocks)

    def _source(self, address: str) -> str:
        if self.index.holds(address):
            return address
        host = self._hosts.get(address)
        if host is None:
            host = address.rpartition(":")[0] or address
            if len(self._hosts) < 65536:
                self._hosts[address] = host
        return host

    def _compute(
        self, cycle: CycleState, request: LLMRequest, addresses: Sequence[str], record: bool = True
    ) -> tuple[PrefixMatch, dict[str, float]]:
        found = cycle.read(self._key)
        if found is not None:
            return found
        ids = self._ids(cycle, request)
        keys = self._keys(ids, request)
        stats = self.lookup_stats if record else None
        started = time.perf_counter() if stats is not None else 0.0
        matched: dict[str, int] = {}
        weighted: dict[str, float] = {}
        spec = self._speculative
        if spec is not None:
            spec.expire()
        if keys:
            for address in addresses:
                m = self.index.match(keys, self._source(address))
                blocks, weight = m.blocks, m.weighted
                if spec is not None:
                    guess = spec.blocks(address, keys)
                    if guess > blocks:
                        weight += guess - blocks
                        blocks = guess
                if blocks:
                    matched[address] = blocks
                    weighted[address] = weight
        if stats is not None and keys:
            stats.record(max(matched.values(), default=0), time.perf_counter() - started)
        found = (
            PrefixMatch(tuple(keys), matched, self.settings.block_size, self.name, len(ids)),
            weighted,
        )
        if spec is not None and keys:
            if len(self._pending) >= 1024:
                self._pending.pop(next(iter(self._pending)))
            self._pending[request.request_id] = found[0].hashes
        cycle.write(self._key, found)
        return found

    def prepare(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> None:
        self._addresses = addresses = tuple(e.address for e in endpoints)
        match, _ = self._compute(cycle, request, addresses)
        if PREFIX_MATCH not in cycle:
            cycle.write(PREFIX_MATCH, match)

    def match(self, cycle: CycleState, request: LLMRequest) -> PrefixMatch:
        """The cycle's match. Computed in ``prepare`` over the cycle's endpoints; a consumer reading it
        before (a plugin configured ahead of this one, or ``latency-slo-admitter`` on a cycle state of
        its own, before scheduling) gets it over the endpoints of the last prepared cycle, the pool as
        the picker last saw it (not counted in the lookup metrics)."""
        found = cycle.read(self._key)
        return found[0] if found is not None else self._compute(cycle, request, self._addresses, False)[0]

    def weighted(self, cycle: CycleState, request: LLMRequest) -> Mapping[str, float]:
        """Tier-weighted cached prefix length (blocks) per endpoint address."""
        found = cycle.read(self._key)
        return found[1] if found is not None else {}

    # -- lifecycle -------------------------------------------------------------------------------------

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        spec = self._speculative
        keys = self._pending.pop(request.request_id, None)
        if spec is None or not keys:
            return
        for profile in result.profile_results.values():
            if profile.targets and not profile.shadow:  # the chosen endpoint, not the fallbacks
                spec.add(profile.targets[0].endpoint.address, keys)

    def dump_state(self) -> dict[str, Any]:
        """``/debug/plugins/state``: the index, the event ingestion (a growing ``hashMismatches`` means
        ``hashSeed`` / ``blockSize`` / the algorithm differ from the servers'), the block-key memo and the
        in-process tokenizer."""
        ing, index = self.ingester, self.index
        state: dict[str, Any] = {
            "index": {
                "servers": len(index.sources()),
                "entries": index.size(),
                "overflowResets": index.overflow_resets,
                "droppedServers": index.dropped_sources,
            },
            "events": {
                "batches": ing.batches,
                "events": ing.events,
                "missedBatches": ing.missed_batches,
                "restarts": ing.restarts,
                "malformed": ing.malformed,
                "hashChecks": ing.hash_checks,
                "hashMismatches": ing.hash_mismatches,
                "blocksAdmitted": ing.admitted,
                "blocksEvicted": ing.evicted,
            },
            "blockKeyMemo": self.keyer.memoised,
        }
        if self.local is not None:
            tok = self.local
            state["tokenizer"] = {
                "path": str(tok.path),
                "chatTemplate": tok.template is not None,
                "cut": tok.mode or None,
                "uncachedBecause": tok.unchunked_reason or None,
                "cachedChunks": tok.cache_entries,
                "tokensFromCache": tok.cached_tokens,
                "tokensTokenized": tok.encoded_tokens,
            }
        return state

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        for address in addresses:
            self.forget(address)

    def forget(self, address: str) -> None:
        self.ingester.forget(address)
        self._hosts.pop(address, None)
        if self._speculative is not None:
            self._speculative.forget(address)


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> PrecisePrefixCacheProducer:
    params = parse_precise_params(parameters, PLUGIN_TYPE, name)
    return PrecisePrefixCacheProducer(name, params, handle.clock)
