"""``approx-prefix-cache-producer``: computes each request's prefix match for prefix consumers.

llm-d-router moved the approximate prefix index out of ``prefix-cache-scorer`` into this producer;
``prefix-cache-scorer`` (and other consumers) read the match it computes, selected by their
``prefixMatchInfoProducerName`` (default: the instance named ``approx-prefix-cache-producer``, created
with default parameters when a consumer needs it and none is configured). The index, hashing and
lifecycle are :class:`~scheduler.plugins.prefix.matcher.PrefixMatcher`'s; the match is computed once
per cycle and shared by every consumer of this instance.

Parameters (defaults): ``autoTune`` (true: learn the block size and capacity from the servers'
``block_size`` / ``num_gpu_blocks``); ``blockSizeTokens`` (16; raised to at least 64 at use, upstream
#1158); ``blockSize`` (deprecated; becomes ``blockSizeTokens`` when that is left at 16);
``maxPrefixTokensToMatch`` (131072: ``maxBlocks = maxPrefixTokensToMatch / blockSize``; 0: use the block
cap); ``maxPrefixBlocksToMatch`` (2048, used when the token cap is 0; both 0: the whole prompt);
``lruCapacityPerServer`` (31250 blocks per endpoint when not learned); pyepp's memory budgets
``maxIndexBytesPerServer`` (64 MiB) and ``maxIndexBytes`` (1 GiB).

A block is ``blockSizeTokens x 4`` characters of the prompt, or, when a ``token-producer`` named
``token-producer`` is configured, ``blockSizeTokens`` of its token ids (upstream always hashes
``token-producer`` ids and injects an ``estimate`` one when none is configured; the estimate's
4-byte pseudo-tokens cut ASCII prompts at the same places as pyepp's 4-character blocks, so pyepp
does not inject it). The block cap never exceeds
``lruCapacityPerServer`` (an endpoint cannot hold more of one prompt than that), which also bounds
"the whole prompt".
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.interfaces import Handle, Plugin
from scheduler.params import param
from scheduler.plugins.base import factory_with_params
from scheduler.plugins.prefix.matcher import PrefixMatcher
from scheduler.plugins.prefix.params import PrefixCacheParams
from scheduler.plugins.tokens.producer import TOKENIZED_PROMPT, TokenProducer
from scheduler.producers import DataNeed

__all__ = ["MIN_BLOCK_SIZE_TOKENS", "ApproxPrefixCacheProducer", "ApproxPrefixParams", "factory"]

MIN_BLOCK_SIZE_TOKENS = 64
_DEFAULT_BLOCK_SIZE_TOKENS = 16


@dataclass(frozen=True, slots=True)
class ApproxPrefixParams:
    auto_tune: bool = param(True)
    block_size_tokens: int = param(_DEFAULT_BLOCK_SIZE_TOKENS, ge=0, le=65536)
    block_size: int = param(0, ge=0, le=65536)
    max_prefix_blocks_to_match: int = param(2048, ge=0)
    max_prefix_tokens_to_match: int = param(131072, ge=0)
    lru_capacity_per_server: int = param(31250, ge=1)
    max_index_bytes_per_server: int = param(64 * 1024 * 1024, ge=1024 * 1024)
    max_index_bytes: int = param(1024 * 1024 * 1024, ge=1024 * 1024)

    def __post_init__(self) -> None:
        if not self.auto_tune and self.effective_block_size_tokens <= 0:
            raise ValueError(
                f"blockSizeTokens must be > 0 when autoTune is disabled (got {self.block_size_tokens})"
            )

    @property
    def effective_block_size_tokens(self) -> int:
        """``blockSizeTokens``, or the deprecated ``blockSize`` when that was left at its default."""
        if self.block_size > 0 and self.block_size_tokens == _DEFAULT_BLOCK_SIZE_TOKENS:
            return self.block_size
        return self.block_size_tokens

    def max_blocks(self, block_size_tokens: int) -> int:
        """The per-request block cap at ``block_size_tokens`` (upstream's resolveMaxBlocks), bounded by
        ``lruCapacityPerServer``."""
        if self.max_prefix_tokens_to_match > 0 and block_size_tokens > 0:
            blocks = self.max_prefix_tokens_to_match // block_size_tokens
        elif self.max_prefix_blocks_to_match == 0:
            blocks = self.lru_capacity_per_server
        else:
            blocks = self.max_prefix_blocks_to_match
        return min(blocks, self.lru_capacity_per_server)

    def index_params(self) -> PrefixCacheParams:
        tokens = max(MIN_BLOCK_SIZE_TOKENS, self.effective_block_size_tokens)
        return PrefixCacheParams(
            block_size_tokens=tokens,
            max_prefix_blocks_to_match=max(1, self.max_blocks(tokens)),
            lru_capacity_per_server=self.lru_capacity_per_server,
            auto_tune=self.auto_tune,
            max_index_bytes_per_server=self.max_index_bytes_per_server,
            max_index_bytes=self.max_index_bytes,
        )


class ApproxPrefixCacheProducer(PrefixMatcher):
    plugin_type = "approx-prefix-cache-producer"
    min_block_tokens = MIN_BLOCK_SIZE_TOKENS
    params: ApproxPrefixParams

    def __init__(self, name: str, params: ApproxPrefixParams) -> None:
        super().__init__(name, params.index_params())
        self.params = params

    def max_blocks(self) -> int:
        return self.params.max_blocks(self.block_size_tokens)

    def produced_keys(self) -> frozenset[str]:
        return frozenset({f"PrefixCacheMatchInfo/{self.name}"})

    def data_needs(self) -> tuple[DataNeed, ...]:
        # Upstream's default TokenizedPrompt key; optional: without one, characters are hashed.
        key = f"{TOKENIZED_PROMPT}/{TokenProducer.plugin_type}"
        return (DataNeed(key, "", False, TokenProducer.plugin_type, optional=True),)

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if isinstance(producer, TokenProducer):
            self.token_source = producer


def _build(name: str, params: ApproxPrefixParams, handle: Handle) -> ApproxPrefixCacheProducer:
    return ApproxPrefixCacheProducer(name, params)


factory = factory_with_params(ApproxPrefixCacheProducer.plugin_type, ApproxPrefixParams, _build)
