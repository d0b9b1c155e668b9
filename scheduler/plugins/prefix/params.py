"""Parameters of ``prefix-cache-scorer`` and the index memory budget.

| YAML key | default | meaning |
|---|---|---|
| ``blockSizeTokens`` | 16 | block size in tokens; a block is ``blockSizeTokens x 4`` characters |
| ``blockSize`` / ``hashBlockSize`` | unset | legacy GIE names: block size in characters (overrides) |
| ``maxPrefixBlocksToMatch`` | 256 | at most this many leading blocks are hashed and matched |
| ``lruCapacityPerServer`` | 31250 | blocks remembered per endpoint (LRU) |
| ``autoTune`` | true | learn block size / capacity from the servers' ``block_size`` / ``num_gpu_blocks`` |
| ``maxIndexBytesPerServer`` | 64 MiB | memory budget per endpoint; capacities above it are rejected |
| ``maxIndexBytes`` | 1 GiB | memory budget of the whole index; shared among the endpoints it holds |

Budgets are counted with :data:`ENTRY_BYTES` (measured cost of one (endpoint, block) entry, rounded
up). ``lruCapacityPerServer`` above the per-endpoint budget, or below ``maxPrefixBlocksToMatch``, is
rejected; autotuned capacities are clamped instead, and every capacity shrinks to the endpoint's
share of ``maxIndexBytes`` (see :mod:`scheduler.plugins.prefix.capacity`).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.params import param

__all__ = ["ENTRY_BYTES", "SCORE_KEYS", "PrefixCacheParams", "PrefixCacheScorerParams", "PrefixScoreParams"]

ENTRY_BYTES = 150
"""Upper bound of the memory one (endpoint, block) entry costs (measured ~130 B, bench/scheduler_bench.py)."""


@dataclass(frozen=True, slots=True)
class PrefixCacheParams:
    block_size_tokens: int = param(16, ge=1, le=65536)
    block_size: int | None = param(None, ge=1, le=262144)
    hash_block_size: int | None = param(None, ge=1, le=262144)
    max_prefix_blocks_to_match: int = param(256, ge=1, le=65536)
    lru_capacity_per_server: int = param(31250, ge=1)
    auto_tune: bool = param(True)
    max_index_bytes_per_server: int = param(64 * 1024 * 1024, ge=1024 * 1024)
    max_index_bytes: int = param(1024 * 1024 * 1024, ge=1024 * 1024)

    def __post_init__(self) -> None:
        if self.block_size is not None and self.hash_block_size is not None:
            raise ValueError(
                "give at most one of blockSize and hashBlockSize (both are the block size in chars)"
            )
        if self.lru_capacity_per_server < self.max_prefix_blocks_to_match:
            raise ValueError(
                f"lruCapacityPerServer ({self.lru_capacity_per_server}) must be at least "
                f"maxPrefixBlocksToMatch ({self.max_prefix_blocks_to_match}): an endpoint must be able "
                "to hold the blocks of one prompt"
            )
        need = self.lru_capacity_per_server * ENTRY_BYTES
        if need > self.max_index_bytes_per_server:
            raise ValueError(
                f"lruCapacityPerServer {self.lru_capacity_per_server} x ~{ENTRY_BYTES} bytes per entry = "
                f"{need / 2**20:.1f} MiB per endpoint exceeds maxIndexBytesPerServer "
                f"({self.max_index_bytes_per_server / 2**20:.1f} MiB); lower lruCapacityPerServer or raise "
                "maxIndexBytesPerServer"
            )

    @property
    def fixed_block_chars(self) -> int | None:
        """Block size in characters given by a legacy parameter (disables block-size autotuning)."""
        return self.block_size if self.block_size is not None else self.hash_block_size

    @property
    def total_entries(self) -> int:
        """The most entries the whole index (every endpoint together) may hold."""
        return max(1, self.max_index_bytes // ENTRY_BYTES)

    @property
    def max_capacity(self) -> int:
        """The most entries per endpoint the memory budget allows."""
        return max(1, self.max_index_bytes_per_server // ENTRY_BYTES)


@dataclass(frozen=True, slots=True)
class PrefixScoreParams:
    """llm-d-router's ``prefix-cache-scorer`` parameters (the scorer consumes a producer's match).

    | YAML key | default | meaning |
    |---|---|---|
    | ``prefixMatchInfoProducerName`` | "" | producer read ("": ``approx-prefix-cache-producer``) |
    | ``matchLengthWeight`` | 0.0 | share of the score given to the absolute match length, in [0, 1] |
    | ``matchLengthScaleTokens`` | 8192 | tokens at which the length term saturates (> 0 when the weight is) |
    """

    prefix_match_info_producer_name: str = param("")
    match_length_weight: float = param(0.0, ge=0.0, le=1.0)
    match_length_scale_tokens: int = param(8192)

    def __post_init__(self) -> None:
        _check_length_scale(self.match_length_weight, self.match_length_scale_tokens)


@dataclass(frozen=True, slots=True)
class PrefixCacheScorerParams(PrefixCacheParams):
    """Every parameter ``prefix-cache-scorer`` takes: its own index's (GIE) plus the scoring ones."""

    prefix_match_info_producer_name: str = param("")
    match_length_weight: float = param(0.0, ge=0.0, le=1.0)
    match_length_scale_tokens: int = param(8192)

    def __post_init__(self) -> None:
        PrefixCacheParams.__post_init__(self)
        _check_length_scale(self.match_length_weight, self.match_length_scale_tokens)

    def scoring(self) -> PrefixScoreParams:
        return PrefixScoreParams(
            self.prefix_match_info_producer_name, self.match_length_weight, self.match_length_scale_tokens
        )


def _check_length_scale(weight: float, scale: int) -> None:
    if weight > 0.0 and scale <= 0:
        raise ValueError(
            f"matchLengthScaleTokens must be greater than 0 when matchLengthWeight is greater than 0, "
            f"got {scale}"
        )


SCORE_KEYS = frozenset({"prefixMatchInfoProducerName", "matchLengthWeight", "matchLengthScaleTokens"})
"""The scorer's own parameter keys; every other ``prefix-cache-scorer`` key configures its index."""
