"""``latency-slo-admitter`` (llm-d-router): reject sheddable requests whose latency SLO no endpoint can meet.

Upstream's rule: requests with priority >= 0, requests without an SLO (``x-slo-ttft-ms`` and
``x-slo-tpot-ms`` both absent or <= 0) and requests arriving while the model is cold (no
predictions) are admitted. A sheddable request (priority < 0) is admitted when some candidate

* is predicted to meet the SLO (TTFT and TPOT valid, see ``predicted-latency-producer``), or
* is idle: its model server reports no running request *and* this picker has dispatched none to it
  that has not completed (**ours**: the scraped count lags the picker's own by up to a scrape
  interval, in which a burst can fill an endpoint that still looks idle), or
* is cold (KV-cache utilisation < 2%: predictions are unreliable there);

otherwise it is rejected with 429 and a reason naming the SLO and the best prediction. The admitter
runs before the scheduling cycle; as upstream (whose data producers run before admission), its
predictions use the request's prefix match (computed once more for the admitter), so an endpoint
holding the prompt is predicted with the cached tokens.

Parameters (upstream's): ``latencyPredictionInfoProducerName`` ("").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.interfaces import Handle, Plugin
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.latency.consumer import LatencyInfoConsumer
from scheduler.plugins.latency.producer import TPOT_SLO_HEADER, TTFT_SLO_HEADER, slo_header
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest

__all__ = ["COLD_KV_USAGE", "LatencySloAdmitter", "LatencySloAdmitterParams", "factory"]

COLD_KV_USAGE = 0.02


@dataclass(frozen=True, slots=True)
class LatencySloAdmitterParams:
    latency_prediction_info_producer_name: str = ""


class LatencySloAdmitter(LatencyInfoConsumer, PluginBase):
    params: LatencySloAdmitterParams
    plugin_type = "latency-slo-admitter"

    def __init__(self, name: str, params: LatencySloAdmitterParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or LatencySloAdmitterParams()
        self.latency_producer_name = params.latency_prediction_info_producer_name

    def data_needs(self) -> Sequence[DataNeed]:
        return self.latency_needs()

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        self.bind_latency_producer(producer)

    def admit(self, request: LLMRequest, endpoints: Sequence[EndpointView]) -> str | None:
        producer = self.latency_producer
        if request.priority >= 0 or producer is None or not endpoints:
            return None
        ttft_slo, tpot_slo = slo_header(request, TTFT_SLO_HEADER), slo_header(request, TPOT_SLO_HEADER)
        if ttft_slo <= 0 and tpot_slo <= 0:
            return None
        infos = producer.admission_predictions(request, endpoints)
        if not infos:
            return None
        for e in endpoints:
            info = infos.get(e.address)
            if info is not None and info.valid:
                return None
            if e.metrics.running_requests == 0 and producer.dispatched(e.address) == 0:
                return None
            if e.metrics.kv_cache_usage < COLD_KV_USAGE:
                return None
        best = min(infos.values(), key=lambda i: i.ttft)
        return (
            f"latency-slo-admitter: no endpoint can meet the latency SLO (x-slo-ttft-ms={ttft_slo:g}, "
            f"x-slo-tpot-ms={tpot_slo:g}; best predicted ttft {best.ttft:.0f} ms, tpot {best.tpot:.1f} ms)"
        )


def _build(name: str, params: LatencySloAdmitterParams, handle: Handle) -> LatencySloAdmitter:
    return LatencySloAdmitter(name, params)


factory = factory_with_params(LatencySloAdmitter.plugin_type, LatencySloAdmitterParams, _build)
