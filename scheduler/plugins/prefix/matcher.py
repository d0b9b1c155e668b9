"""The approximate prefix index behind ``prefix-cache-scorer`` and ``approx-prefix-cache-producer``.

:class:`PrefixMatcher` owns one :class:`~scheduler.plugins.prefix.index.PrefixIndex` and computes a
request's :class:`~scheduler.plugins.prefix.match.PrefixMatch`: the prompt is cut into full blocks of
``block_size_tokens x 4`` characters (at most :meth:`PrefixMatcher.max_blocks`), hashed as a chain
(:mod:`scheduler.plugins.prefix.hashing`) and looked up in the index; ``matched`` counts consecutive
blocks from the start per endpoint.

Lifecycle: ``prepare`` computes the match once per cycle and publishes it (``PREFIX_MATCH``, unless
an earlier plugin did); ``on_dispatched`` records the prompt's blocks for the primary endpoint and,
in P/D, for the prefill endpoint named by ``x-prefiller-host-port``; ``on_endpoints_removed`` purges.

With a bound ``token-producer`` (only ``approx-prefix-cache-producer`` binds one) the blocks are
``block_size_tokens`` of its token ids instead
(:func:`~scheduler.plugins.prefix.hashing.token_prefix_hashes`); a request it produced no ids for
matches nothing and is not recorded, as upstream.

Autotuning (``autoTune``): the block size is taken once from the first endpoint that reports
``block_size`` (unless a legacy character block size fixes it; the index is cleared if it already had
entries) and raised to :attr:`PrefixMatcher.min_block_tokens`; each endpoint's capacity becomes
``num_gpu_blocks x block_size / block_size_tokens`` clamped to the memory budgets
(:mod:`scheduler.plugins.prefix.capacity`). Parameters: :mod:`scheduler.plugins.prefix.params`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from scheduler.cycle_state import CycleState, StateKey
from scheduler.headers import PREFILLER_HEADER
from scheduler.interfaces import PrefixIndexStats
from scheduler.plugins.base import PluginBase
from scheduler.plugins.prefix.capacity import CapacityPlanner
from scheduler.plugins.prefix.hashing import ChainHasher
from scheduler.plugins.prefix.index import PrefixIndex
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.plugins.prefix.params import PrefixCacheParams
from scheduler.plugins.tokens.producer import TokenProducer
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = ["PrefixMatcher"]

_PENDING_LIMIT = 1024  # hash chains kept from prepare to on_dispatched (bounded: <= ~10 MB)


class PrefixMatcher(PluginBase):
    """Index, hashing and lifecycle hooks shared by the prefix plugins (no ``score``); a
    :class:`~scheduler.interfaces.PrefixIndexStats`."""

    min_block_tokens = 1
    """Smallest block size (tokens) used, whatever was configured or learned."""
    token_source: TokenProducer | None = None
    """The token producer whose ids are hashed (None: characters of the prompt text)."""

    def __init__(self, name: str, params: PrefixCacheParams) -> None:
        super().__init__(name)
        self.index_params = params
        self.index = PrefixIndex(min(params.lru_capacity_per_server, params.max_capacity))
        self.capacities = CapacityPlanner(
            self.index,
            params.lru_capacity_per_server,
            params.max_capacity,
            params.total_entries,
            params.max_prefix_blocks_to_match,
        )
        fixed = params.fixed_block_chars
        tokens = params.block_size_tokens if fixed is None else max(1, fixed // 4)
        if tokens < self.min_block_tokens:
            fixed, tokens = None, self.min_block_tokens
        self._block_chars = fixed if fixed is not None else tokens * 4
        self._learn_block_size = params.auto_tune and fixed is None
        self._key: StateKey[PrefixMatch] = StateKey(f"{self.plugin_type}/{name}")
        self._pending: dict[str, tuple[int, ...]] = {}
        self._hasher = ChainHasher()

    @property
    def block_chars(self) -> int:
        return self._block_chars

    @property
    def block_size_tokens(self) -> int:
        return max(1, self._block_chars // 4)

    def max_blocks(self) -> int:
        """How many leading blocks of a prompt are hashed and matched."""
        return self.index_params.max_prefix_blocks_to_match

    # -- PrefixIndexStats ---------------------------------------------------------------------------

    def stats_index(self) -> PrefixIndexStats | None:
        """This plugin: it holds its own index."""
        return self

    def index_entries(self) -> int:
        """Distinct block hashes held by the index."""
        return len(self.index)

    # -- per cycle ----------------------------------------------------------------------------------

    def hashes(self, request: LLMRequest) -> tuple[int, ...]:
        """The request's chained block hashes (pure)."""
        return self._hasher.hashes(
            request.prompt_text,
            request.target_model,
            request.cache_salt,
            self._block_chars,
            self.max_blocks(),
        )

    def match(self, cycle: CycleState, request: LLMRequest) -> PrefixMatch:
        """The memoised match of this cycle (computed on first use)."""
        found = cycle.read(self._key)
        if found is None:
            source = self.token_source
            ids: Sequence[int] | None = None
            if source is None:
                hashes = self.hashes(request)
            else:
                ids = source.tokens(cycle, request)
                hashes = (
                    self._hasher.token_hashes(
                        ids,
                        request.target_model,
                        request.cache_salt,
                        self.block_size_tokens,
                        self.max_blocks(),
                    )
                    if ids
                    else ()
                )
            found = PrefixMatch(
                hashes, self.index.match(hashes), self.block_size_tokens, self.name, len(ids or ())
            )
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

    # -- lifecycle ----------------------------------------------------------------------------------

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        hashes = self._pending.pop(request.request_id, None)
        if hashes is None and self.token_source is None:
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
                self._autotuned_capacity(endpoint)
                if endpoint is not None and self.index_params.auto_tune
                else None
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
                size = max(size, self.min_block_tokens)
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


if TYPE_CHECKING:  # mypy: the prefix plugins stay PrefixIndexStats (a rename fails type checking)
    _STATS: type[PrefixIndexStats] = PrefixMatcher
