"""Reading a prefix producer's match: the consumer side of llm-d-router's ``prefixMatchInfoProducerName``.

:class:`PrefixMatchConsumer` is a mixin for plugins that read the per-request prefix match without
owning an index (``no-hit-lru-scorer``, ``prefix-cache-affinity-filter``, ``pd-profile-handler``,
...). Set ``producer_name`` (the parameter's value, "" for the default) in the constructor.
Wiring (:mod:`scheduler.producers`): the match comes from the named ``approx-prefix-cache-producer``
(default: the instance of that name, injected under ``llm-d.ai/v1alpha1`` when absent); a
``prefix-cache-scorer`` configured with its own index, or the legacy apiVersion, leaves the plugin on
the cycle's published match (:func:`~scheduler.plugins.prefix.match.prefix_match`). A name that
produces nothing is a ConfigError at ``prefixMatchInfoProducerName``.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Plugin
from scheduler.plugins.prefix.match import PrefixMatch, PrefixMatchSource, prefix_match
from scheduler.plugins.prefix.scorer import DEFAULT_PRODUCER, PREFIX_MATCH_INFO, PUBLISHED_PREFIX_MATCH
from scheduler.producers import DataNeed
from scheduler.types import LLMRequest

__all__ = ["PrefixMatchConsumer"]


class PrefixMatchConsumer:
    """Mixin: ``data_needs`` / ``bind_producer`` / ``prefix_match_for`` over ``producer_name``."""

    producer_name: str = ""
    uses_producer: bool = True  # False: the plugin reads the published match whatever is configured
    prefix_match_optional: bool = False  # True: no producer is injected when none is configured
    _producer: PrefixMatchSource | None = None

    def data_needs(self) -> Sequence[DataNeed]:
        if not self.uses_producer:
            return ()
        key = f"{PREFIX_MATCH_INFO}/{self.producer_name or DEFAULT_PRODUCER}"
        return (
            DataNeed(
                key,
                "prefixMatchInfoProducerName",
                bool(self.producer_name),
                DEFAULT_PRODUCER,
                legacy_self_contained=True,
                fallback_key=PUBLISHED_PREFIX_MATCH,
                optional=self.prefix_match_optional,
            ),
        )

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if producer is not None:
            assert isinstance(producer, PrefixMatchSource)
            self._producer = producer

    @property
    def producer(self) -> PrefixMatchSource | None:
        """The producer read (None: the cycle's published match)."""
        return self._producer

    def prefix_match_for(self, cycle: CycleState, request: LLMRequest) -> PrefixMatch | None:
        producer = self._producer
        return producer.match(cycle, request) if producer is not None else prefix_match(cycle)
