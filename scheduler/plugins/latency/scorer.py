"""``latency-scorer`` (llm-d-router): score endpoints by predicted-latency headroom.

Reads the ``predicted-latency-producer``'s per-endpoint predictions (headroom = SLO - predicted, ms;
without SLO headers the headroom is ``-predicted``, so the lowest predicted latency wins). Upstream's
algorithm:

* an endpoint is *negative* when its TTFT or TPOT headroom is < 0. If any endpoint is positive, only
  the positive ones are scored (the negative get 0);
* all negative: the idle ones (no request dispatched by this picker) are scored alone if any; else
  the first non-empty bucket of (only TPOT negative, only TTFT negative, both negative);
* within the scored set, ``|headroom|`` is min-max normalised per dimension (0.5 when the range is 0)
  and blended ``c = a nTTFT + b nTPOT`` with ``a, b = ttftWeight, tpotWeight`` normalised to sum 1
  (1, 0 when both are 0); a dimension with zero range hands its weight to the other;
* ``least`` (default): score ``(floor((1 - c) x 99) + 1) / 100``, the endpoint closest to its SLO
  first (bin packing); ``most``: ``(floor(c x 99) + 1) / 100``. Negative buckets always use ``least``.
  (Upstream multiplies by 100, which gives 1.01 at the top; pyepp's scores stay in [0.01, 1] so that
  clamping cannot tie the best endpoint with the next one.)

Without predictions (cold model, ``predictInProduce: false``) the composite fallback:
``round(100 x (wKV (1 - kv) + wQ relQueue + wP prefix)) / 100`` with ``relQueue = (maxQ - q) / maxQ``
(1 when every queue is empty), ``prefix`` the prefix-match score and the weights normalised to sum 1.
``q`` is the larger of the scraped waiting queue (upstream's) and the requests this picker sent to the
endpoint that have not produced a first token yet (**ours**: the scrape lags by up to an interval, in
which a cold start's burst of uncached prompts all looked at the same gauges; and an engine prefilling
one prompt at a time reports the others as running, not waiting).

Parameters (upstream's): ``ttftWeight`` (>= 0, 0.8), ``tpotWeight`` (>= 0, 0.2),
``headroomSelectionStrategy`` (``least`` | ``most``), ``compositeKVWeight`` / ``compositeQueueWeight``
/ ``compositePrefixWeight`` (>= 0, 1 each), ``latencyPredictionInfoProducerName`` (""),
``prefixMatchInfoProducerName`` ("").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle, Plugin
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.latency.consumer import LatencyInfoConsumer
from scheduler.plugins.latency.producer import LATENCY_PREDICTION_INFO, LatencyPredictionInfo
from scheduler.plugins.prefix.consumer import PrefixMatchConsumer
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest

__all__ = ["LatencyScorer", "LatencyScorerParams", "factory"]

_EPS = 1e-9
_W_MAX = 100


@dataclass(frozen=True, slots=True)
class LatencyScorerParams:
    ttft_weight: float = param(0.8, ge=0, key="ttftWeight")
    tpot_weight: float = param(0.2, ge=0, key="tpotWeight")
    headroom_selection_strategy: str = param("least", choices=("least", "most"))
    composite_kv_weight: float = param(1.0, ge=0, key="compositeKVWeight")
    composite_queue_weight: float = param(1.0, ge=0)
    composite_prefix_weight: float = param(1.0, ge=0)
    latency_prediction_info_producer_name: str = ""
    prefix_match_info_producer_name: str = ""


class LatencyScorer(LatencyInfoConsumer, PrefixMatchConsumer, PluginBase):
    params: LatencyScorerParams
    plugin_type = "latency-scorer"

    def __init__(self, name: str, params: LatencyScorerParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or LatencyScorerParams()
        self.latency_producer_name = params.latency_prediction_info_producer_name
        self.producer_name = params.prefix_match_info_producer_name

    def data_needs(self) -> Sequence[DataNeed]:
        return (*self.latency_needs(), *PrefixMatchConsumer.data_needs(self))

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if key.startswith(f"{LATENCY_PREDICTION_INFO}/"):
            self.bind_latency_producer(producer)
        else:
            PrefixMatchConsumer.bind_producer(self, key, producer)

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        infos = self.latency_info(cycle, request, endpoints)
        if infos is None:
            return self.composite(cycle, request, endpoints)
        scores = [0.0] * len(endpoints)
        rows = [(i, infos[e.address]) for i, e in enumerate(endpoints) if e.address in infos]
        positive = [(i, p) for i, p in rows if p.ttft_headroom >= 0 and p.tpot_headroom >= 0]
        if positive:
            self._score_bucket(positive, scores, self.params.headroom_selection_strategy == "most")
            return scores
        idle = [(i, p) for i, p in rows if p.dispatched_request_count == 0]
        if idle:
            self._score_bucket(idle, scores, False)
            return scores
        tpot_only = [(i, p) for i, p in rows if p.ttft_headroom >= 0]
        ttft_only = [(i, p) for i, p in rows if p.ttft_headroom < 0 <= p.tpot_headroom]
        for bucket in (tpot_only, ttft_only, rows):
            if bucket:
                self._score_bucket(bucket, scores, False)
                break
        return scores

    def _score_bucket(
        self, bucket: list[tuple[int, LatencyPredictionInfo]], scores: list[float], most: bool
    ) -> None:
        a, b = self.params.ttft_weight, self.params.tpot_weight
        total = a + b
        a, b = (a / total, b / total) if total > 0 else (1.0, 0.0)
        ttft = [abs(p.ttft_headroom) for _, p in bucket]
        tpot = [abs(p.tpot_headroom) for _, p in bucket]
        t_lo, t_range = min(ttft), max(ttft) - min(ttft)
        p_lo, p_range = min(tpot), max(tpot) - min(tpot)
        if t_range <= _EPS < p_range:
            a, b = 0.0, 1.0
        elif p_range <= _EPS < t_range:
            a, b = 1.0, 0.0
        for (i, _), h_t, h_p in zip(bucket, ttft, tpot, strict=True):
            n_t = (h_t - t_lo) / t_range if t_range > _EPS else 0.5
            n_p = (h_p - p_lo) / p_range if p_range > _EPS else 0.5
            combined = a * n_t + b * n_p
            share = combined if most else 1.0 - combined
            scores[i] = (int(share * (_W_MAX - 1)) + 1) / _W_MAX

    def composite(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> list[float]:
        """The fallback score without predictions (see the module docstring)."""
        p = self.params
        wkv, wq, wp = p.composite_kv_weight, p.composite_queue_weight, p.composite_prefix_weight
        total = wkv + wq + wp
        wkv, wq, wp = (wkv / total, wq / total, wp / total) if total > 0 else (1.0, 0.0, 0.0)
        producer = self.latency_producer
        queues = [
            max(e.metrics.waiting_queue_size, producer.awaiting_first_token(e.address) if producer else 0)
            for e in endpoints
        ]
        max_q = max(queues, default=0)
        match = self.prefix_match_for(cycle, request)
        out = []
        for e, q in zip(endpoints, queues, strict=True):
            rel_queue = (max_q - q) / max_q if max_q > 0 else 1.0
            prefix = match.score(e.address) if match is not None and match.hashes else 0.0
            composite = wkv * (1.0 - e.metrics.kv_cache_usage) + wq * rel_queue + wp * prefix
            out.append(round(_W_MAX * composite) / _W_MAX)
        return out


def _build(name: str, params: LatencyScorerParams, handle: Handle) -> LatencyScorer:
    return LatencyScorer(name, params)


factory = factory_with_params(LatencyScorer.plugin_type, LatencyScorerParams, _build)
