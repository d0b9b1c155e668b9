"""Reading a ``predicted-latency-producer``: the consumer side of ``latencyPredictionInfoProducerName``.

Mixin for ``latency-scorer``, ``slo-headroom-tier-filter``, ``latency-slo-admitter`` and
``prefix-cache-affinity-filter`` (``ttftSource: latencyPredictor``). Wiring
(:mod:`scheduler.producers`): the producer named by the parameter (default: the instance named
``predicted-latency-producer``, created with default parameters when the configuration has none); a
name that produces nothing is a ConfigError at ``latencyPredictionInfoProducerName``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Plugin
from scheduler.plugins.latency.producer import (
    DEFAULT_PRODUCER,
    LATENCY_PREDICTION_INFO,
    LatencyPredictionInfo,
    PredictedLatencyProducer,
)
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest

__all__ = ["LatencyInfoConsumer"]


class LatencyInfoConsumer:
    """Mixin: ``latency_needs`` / ``bind_latency_producer`` / ``latency_info`` over
    ``latency_producer_name``."""

    latency_producer_name: str = ""
    latency_producer: PredictedLatencyProducer | None = None

    def latency_key(self) -> str:
        return f"{LATENCY_PREDICTION_INFO}/{self.latency_producer_name or DEFAULT_PRODUCER}"

    def latency_needs(self) -> Sequence[DataNeed]:
        explicit = bool(self.latency_producer_name)
        return (
            DataNeed(self.latency_key(), "latencyPredictionInfoProducerName", explicit, DEFAULT_PRODUCER),
        )

    def bind_latency_producer(self, producer: Plugin | None) -> None:
        if producer is not None:
            assert isinstance(producer, PredictedLatencyProducer)
            self.latency_producer = producer

    def latency_info(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Mapping[str, LatencyPredictionInfo] | None:
        """The cycle's predictions per address (None: no producer bound, or no predictions yet)."""
        producer = self.latency_producer
        return producer.predictions(cycle, request, endpoints) if producer is not None else None
