"""What ``predicted-latency-producer`` publishes and takes (:mod:`scheduler.plugins.latency.producer`):
the per-endpoint :class:`LatencyPredictionInfo` its consumers read under :data:`LATENCY_PREDICTION_INFO`,
the SLO headers and how they read (:func:`slo_header`), its parameters (:class:`PredictedLatencyParams`)
and upstream's parameters it refuses, with the reason (:data:`REJECTED`)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.headers import SLO_TPOT_HEADER, SLO_TTFT_HEADER
from scheduler.params import param
from scheduler.plugins.latency.prior import DEFAULT_PREFILL_THROUGHPUT
from scheduler.types import LLMRequest

__all__ = [
    "LATENCY_PREDICTION_INFO",
    "REJECTED",
    "TPOT_SLO_HEADER",
    "TTFT_SLO_HEADER",
    "LatencyPredictionInfo",
    "PredictedLatencyParams",
    "slo_header",
]

LATENCY_PREDICTION_INFO = "LatencyPredictionInfo"
TTFT_SLO_HEADER = SLO_TTFT_HEADER  # the names plugins of this package import
TPOT_SLO_HEADER = SLO_TPOT_HEADER
REJECTED = {
    "samplingMean": "is deprecated upstream and ignored there; remove it",
    "maxDecodeTokenSamplesForPrediction": "is deprecated upstream and ignored there; remove it",
    "useEncoderCacheFeatures": "needs multimodal encoder-cache matching, which pyepp does not implement",
    "encoderCacheMatchInfoProducerName": (
        "needs multimodal encoder-cache matching, which pyepp does not implement"
    ),
    "inFlightLoadProducerName": (
        "is not supported: pyepp's predicted-latency-producer keeps its own in-flight accounting"
    ),
}


def slo_header(request: LLMRequest, name: str) -> float:
    """The SLO header's value in ms (0 when absent, not a number or not finite, as upstream)."""
    raw = request.headers.get(name)
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        return 0.0
    return value if value == value and abs(value) != float("inf") else 0.0


@dataclass(frozen=True, slots=True)
class PredictedLatencyParams:
    slo_buffer_factor: float = param(1.0, gt=0)
    context_ttl: float = param(
        300.0, gt=0, key="contextTTL", convert=parse_duration, expect=DURATION_EXPECT + " > 0"
    )
    streaming_mode: bool = False
    endpoint_role_label: str = ""
    predict_in_produce: bool = True
    prefix_match_info_producer_name: str = ""
    cold_start_prior: bool = True
    cold_start_prefill_throughput: float = param(DEFAULT_PREFILL_THROUGHPUT, gt=0)


@dataclass(frozen=True, slots=True)
class LatencyPredictionInfo:
    """One endpoint's prediction for one request (upstream's attribute of the same name; ms)."""

    ttft_valid: bool
    tpot_valid: bool
    ttft_headroom: float
    tpot_headroom: float
    ttft: float
    tpot: float
    dispatched_request_count: int

    @property
    def valid(self) -> bool:
        return self.ttft_valid and self.tpot_valid
