"""``prefix-cache-scorer``: prefer endpoints that probably hold the longest prefix of the prompt.

Formula: ``score(e) = matched_blocks(e) / total_blocks`` where the prompt is cut into full blocks of
``blockSizeTokens x 4`` characters (at most ``maxPrefixBlocksToMatch``), hashed as a chain
(:mod:`scheduler.plugins.prefix.hashing`) and looked up in the approximate index
(:mod:`scheduler.plugins.prefix.index`); ``matched_blocks`` counts consecutive blocks from the start.
A prompt shorter than one block scores 0 everywhere.

Lifecycle: ``prepare`` computes the match once per cycle and publishes it (``PREFIX_MATCH``);
``on_dispatched`` records the prompt's blocks for the primary endpoint and, in P/D, for the prefill
endpoint named by ``x-prefiller-host-port``; ``on_endpoints_removed`` purges endpoints.

Autotuning (``autoTune``, default true): the block size is taken once from the first endpoint that
reports ``block_size`` (unless ``blockSize``/``hashBlockSize`` fix it; the index is cleared if it
already had entries), and each endpoint's capacity becomes ``num_gpu_blocks x block_size /
blockSizeTokens`` clamped to the memory budgets (:mod:`scheduler.plugins.prefix.capacity`).
Parameters: see :mod:`scheduler.plugins.prefix.params`.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState, StateKey
from scheduler.interfaces import Handle
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.prefix.capacity import CapacityPlanner
from scheduler.plugins.prefix.hashing import ChainHasher
from scheduler.plugins.prefix.index import PrefixIndex
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.plugins.prefix.params import PrefixCacheParams
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = ["PREFILLER_HEADER", "PrefixCacheScorer", "factory"]

PREFILLER_HEADER = "x-prefiller-host-port"
_PENDING_LIMIT = 1024  # hash chains kept from prepare to on_dispatched (bounded: <= ~10 MB)


class PrefixCacheScorer(PluginBase):
    plugin_type = "prefix-cache-scorer"
    params: PrefixCacheParams

    def __init__(self, name: str, params: PrefixCacheParams) -> None:
        super().__init__(name)
        self.params = params
        self.index = PrefixIndex(min(params.lru_capacity_per_server, params.max_capacity))
        self.capacities = CapacityPlanner(
            self.index,
            params.lru_capacity_per_server,
            params.max_capacity,
            params.total_entries,
            params.max_prefix_blocks_to_match,
        )
        fixed = params.fixed_block_chars
        self._block_chars = fixed if fixed is not None else params.block_size_tokens * 4
        self._learn_block_size = params.auto_tune and fixed is None
        self._key: StateKey[PrefixMatch] = StateKey(f"prefix-cache-scorer/{name}")
        self._pending: dict[str, tuple[int, ...]] = {}
        self._hasher = ChainHasher()

    @property
    def block_chars(self) -> int:
        return self._block_chars

    @property
    def block_size_tokens(self) -> int:
        return max(1, self._block_chars // 4)

    # -- per cycle ----------------------------------------------------------------------------------

    def hashes(self, request: LLMRequest) -> tuple[int, ...]:
        """The request's chained block hashes (pure)."""
        return self._hasher.hashes(
            request.prompt_text,
            request.target_model,
            request.cache_salt,
            self._block_chars,
            self.params.max_prefix_blocks_to_match,
        )

    def match(self, cycle: CycleState, request: LLMRequest) -> PrefixMatch:
        """The memoised match of this cycle (computed on first use)."""
        found = cycle.read(self._key)
        if found is None:
            hashes = self.hashes(request)
            found = PrefixMatch(hashes, self.index.match(hashes), self.block_size_tokens, self.name)
            cycle.write(self._key, found)
            if len(self._pending) >= _PENDING_LIMIT:
                self._pending.pop(next(iter(self._pending)))
            self._pending[request.request_id] = hashes
        return found

    def prepare(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> None:
        if self._learn_block_size:
            self._autotune_block_size(endpoints)
        found = self.match(cycle, request)
        if PREFIX_MATCH not in cycle:
            cycle.write(PREFIX_MATCH, found)

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        found = self.match(cycle, request)
        total = found.total_blocks
        if not total or not found.matched:
            return [0.0] * len(endpoints)
        get = found.matched.get
        return [get(e.address, 0) / total for e in endpoints]

    # -- lifecycle ----------------------------------------------------------------------------------

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        hashes = self._pending.pop(request.request_id, None)
        if hashes is None:
            hashes = self.hashes(request)
        if not hashes or not result.endpoints:
            return
        primary = result.endpoints[0]
        targets: dict[str, EndpointView | None] = {primary.address: primary}
        prefiller = result.headers.get(PREFILLER_HEADER)
        if prefiller and prefiller not in targets:
            targets[prefiller] = _find(result, prefiller)
        for address, endpoint in targets.items():
            own = (
                self._autotuned_capacity(endpoint) if endpoint is not None and self.params.auto_tune else None
            )
            self.capacities.admit(address, own)
            self.index.insert(address, hashes)

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        self.index.remove(addresses)
        self.capacities.removed(addresses)

    # -- autotuning ---------------------------------------------------------------------------------

    def _autotune_block_size(self, endpoints: Sequence[EndpointView]) -> None:
        for e in endpoints[:8]:  # any endpoint will do; bounded so a pool that never reports stays cheap
            size = e.metrics.block_size
            if size:
                self._learn_block_size = False
                if size * 4 != self._block_chars:
                    self._block_chars = size * 4
                    self.index.clear()
                return

    def _autotuned_capacity(self, endpoint: EndpointView) -> int | None:
        blocks = endpoint.metrics.num_gpu_blocks
        if not blocks:
            return None
        server_block = endpoint.metrics.block_size or self.block_size_tokens
        return max(1, blocks * server_block // self.block_size_tokens)


def _find(result: SchedulingResult, address: str) -> EndpointView | None:
    for profile_result in result.profile_results.values():
        for target in profile_result.targets:
            if target.endpoint.address == address:
                return target.endpoint
    return None


def _build(name: str, params: PrefixCacheParams, handle: Handle) -> PrefixCacheScorer:
    return PrefixCacheScorer(name, params)


factory = factory_with_params(PrefixCacheScorer.plugin_type, PrefixCacheParams, _build)
