"""``prefix-cache-scorer``: prefer endpoints that probably hold the longest prefix of the prompt.

Formula (llm-d-router): ``score(e) = w x min(1, matched(e) x block_tokens / matchLengthScaleTokens)^2
+ (1 - w) x matched(e) / total_blocks`` with ``w = matchLengthWeight`` (default 0: the match ratio
only); a prompt shorter than one block scores 0 everywhere. ``matched`` and ``total_blocks`` come
from a :class:`~scheduler.plugins.prefix.match.PrefixMatch`.

Where the match comes from (see :mod:`scheduler.producers`):

* *consumer* (llm-d-router): the scorer reads the match of the ``approx-prefix-cache-producer``
  named by ``prefixMatchInfoProducerName`` (default: the instance named
  ``approx-prefix-cache-producer``, created with default parameters when not configured);
* *self-contained* (GIE v1): the scorer owns its index
  (:class:`~scheduler.plugins.prefix.matcher.PrefixMatcher`) when an index parameter
  (``blockSizeTokens``, ``lruCapacityPerServer``, ...) is given, under either apiVersion
  (llm-d-inference-scheduler ships ``llm-d.ai/v1alpha1`` files that configure the scorer's index),
  and under the legacy apiVersion when no producer is named or configured. Index parameters together
  with ``prefixMatchInfoProducerName`` are an error. ``epp check-config --to llm-d.ai/v1alpha1``
  writes a self-contained scorer's index parameters out, so it stays self-contained.

Parameters: :mod:`scheduler.plugins.prefix.params` (``PrefixCacheScorerParams``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin, PrefixIndexStats
from scheduler.params import params_to_dict, parse_params, plugin_location
from scheduler.plugins.prefix.match import PrefixMatch, PrefixMatchSource
from scheduler.plugins.prefix.matcher import PrefixMatcher
from scheduler.plugins.prefix.params import SCORE_KEYS, PrefixCacheScorerParams, PrefixScoreParams
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = [
    "DEFAULT_PRODUCER",
    "PREFIX_MATCH_INFO",
    "PUBLISHED_PREFIX_MATCH",
    "PrefixCacheScorer",
    "factory",
]

PREFIX_MATCH_INFO = "PrefixCacheMatchInfo"
"""Data type of the per-request prefix match (llm-d-router's ``PrefixCacheMatchInfoDataKey``)."""
DEFAULT_PRODUCER = "approx-prefix-cache-producer"
PUBLISHED_PREFIX_MATCH = f"{PREFIX_MATCH_INFO}/(published)"
"""The key a scorer configured with its own index produces: the cycle's published match
(:data:`~scheduler.plugins.prefix.match.PREFIX_MATCH`), which other prefix consumers fall back to."""


class PrefixCacheScorer(PrefixMatcher):
    plugin_type = "prefix-cache-scorer"
    params: PrefixCacheScorerParams | PrefixScoreParams

    def __init__(
        self, name: str, params: PrefixCacheScorerParams, index_parameters: tuple[str, ...] = ()
    ) -> None:
        super().__init__(name, params)
        self.params = params
        self.scoring = params.scoring()
        self.index_parameters = index_parameters
        """Index parameters the configuration gave explicitly (they make the scorer self-contained)."""
        self._producer: PrefixMatchSource | None = None

    @property
    def producer(self) -> PrefixMatchSource | None:
        """The producer whose match this scorer reads (None: self-contained)."""
        return self._producer

    def stats_index(self) -> PrefixIndexStats | None:
        """Its own index when self-contained; else the producer's when that reports stats (the
        approximate producer does, the precise one does not: None)."""
        if self._producer is None:
            return self
        return self._producer if isinstance(self._producer, PrefixIndexStats) else None

    # -- producer model -----------------------------------------------------------------------------

    def produced_keys(self) -> frozenset[str]:
        """:data:`PUBLISHED_PREFIX_MATCH` when configured with index parameters (it owns its index)."""
        return frozenset({PUBLISHED_PREFIX_MATCH}) if self.index_parameters else frozenset()

    def data_needs(self) -> Sequence[DataNeed]:
        if self.index_parameters:
            return ()
        named = self.scoring.prefix_match_info_producer_name
        return (
            DataNeed(
                f"{PREFIX_MATCH_INFO}/{named or DEFAULT_PRODUCER}",
                "prefixMatchInfoProducerName",
                bool(named),
                DEFAULT_PRODUCER,
                legacy_self_contained=True,
            ),
        )

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if producer is None:
            return
        assert isinstance(producer, PrefixMatchSource)
        self._producer = producer
        self.params = self.scoring

    def standalone_parameters(self) -> Mapping[str, Any] | None:
        if self._producer is not None:
            return None
        out = params_to_dict(self.params)
        for key in SCORE_KEYS:  # the scoring keys only where they differ from the defaults
            if out[key] == params_to_dict(PrefixScoreParams())[key]:
                del out[key]
        return out

    # -- per cycle ----------------------------------------------------------------------------------

    def match(self, cycle: CycleState, request: LLMRequest) -> PrefixMatch:
        if self._producer is not None:
            return self._producer.match(cycle, request)
        return super().match(cycle, request)

    def prepare(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> None:
        if self._producer is None:
            super().prepare(cycle, request, endpoints)

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        found = self.match(cycle, request)
        total = found.total_blocks
        if not total or not found.matched:
            return [0.0] * len(endpoints)
        get = found.matched.get
        weight = self.scoring.match_length_weight
        if weight <= 0.0:
            return [get(address, 0) / total for address in cycle.addresses(endpoints)]
        scale = self.scoring.match_length_scale_tokens
        block = found.block_size_tokens
        out = []
        for e in endpoints:
            blocks = get(e.address, 0)
            length = min(1.0, blocks * block / scale)
            out.append(weight * length * length + (1.0 - weight) * blocks / total)
        return out

    # -- lifecycle ----------------------------------------------------------------------------------

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        if self._producer is None:
            super().on_dispatched(request, result)

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        if self._producer is None:
            super().on_endpoints_removed(addresses)


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> PrefixCacheScorer:
    params = parse_params(PrefixCacheScorerParams, parameters, PrefixCacheScorer.plugin_type, name)
    given = tuple(k for k in (parameters or {}) if k not in SCORE_KEYS)
    if given and params.prefix_match_info_producer_name:
        raise ConfigError(
            f"{given[0]} configures the scorer's own index, which a scorer reading a producer "
            "(prefixMatchInfoProducerName) does not have: set it on the approx-prefix-cache-producer",
            location=f"{plugin_location(PrefixCacheScorer.plugin_type, name)}: parameters.{given[0]}",
        )
    return PrefixCacheScorer(name, params, given)
