"""The predicted-latency-producer's families (upstream ``predictedlatency/metrics.go``), recorded per
request through a real scheduler into the picker's real registry, under each naming scheme."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from epp.server.metric_catalog import Naming
from epp.server.metrics import SchedulerMetrics
from scheduler.config import load_config_text
from scheduler.plugins.latency.model import MIN_SAMPLES, Features
from scheduler.plugins.latency.producer import PredictedLatencyProducer
from scheduler.scheduler import Scheduler
from scheduler.types import Completion, Endpoint, LLMRequest, Metrics, Outcome, Usage

CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters: {streamingMode: true}
- type: latency-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: latency-scorer}, {pluginRef: max-score-picker}]
"""
BUSY = Metrics(running_requests=3, kv_cache_usage=0.5)
FAST = Endpoint("10.0.0.1:8000", "fast", metrics=BUSY)
SLOW = Endpoint("10.0.0.2:8000", "slow", metrics=BUSY)
PLUGIN = {"plugin_name": "predicted-latency-producer", "plugin_type": "predicted-latency-producer"}
MODELS = {"model_name": "m", "target_model_name": "tm"}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def build(naming: Naming) -> tuple[Scheduler, PredictedLatencyProducer, CollectorRegistry, Clock]:
    registry, clock = CollectorRegistry(), Clock()
    scheduler = load_config_text(CONFIG, clock=clock).build_scheduler(
        observer=SchedulerMetrics(registry, naming=naming)
    )
    producer = next(p for p in scheduler.plugins if isinstance(p, PredictedLatencyProducer))
    return scheduler, producer, registry, clock


def train(producer: PredictedLatencyProducer) -> None:
    """TTFT 100 ms / TPOT 10 ms on FAST, 1000 ms / 40 ms on SLOW."""
    f = Features(1000, 1000, 0, 0, 0, 0.5)
    for _ in range(10 * MIN_SAMPLES):
        producer.model.observe(FAST.address, f, 100.0, 10.0)
        producer.model.observe(SLOW.address, f, 1000.0, 40.0)
    producer.model.refit()


def serve(scheduler: Scheduler, clock: Clock, request: LLMRequest, first: float, rest: float,
          tokens: int) -> str:  # fmt: skip
    """Schedule, dispatch, stream (first chunk after ``first`` s, end ``rest`` s later), complete."""
    result = scheduler.schedule(request, [FAST, SLOW])
    scheduler.dispatched(request, result)
    clock.now += first
    scheduler.response_chunk(request, result, b"data: x")
    clock.now += rest
    scheduler.completed(request, result, Completion(Outcome.OK, usage=Usage(completion_tokens=tokens)))
    return result.endpoints[0].address


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def request(i: int, **headers: str) -> LLMRequest:
    hs = {k.replace("_", "-"): v for k, v in headers.items()}
    return LLMRequest(f"r{i}", "m", "tm", token_estimate=1000, headers=hs)


@pytest.mark.parametrize("naming", list(Naming))
def test_each_request_records_actual_predicted_and_slo_under_the_chosen_names(naming: Naming) -> None:
    scheduler, producer, registry, clock = build(naming)
    train(producer)
    # TTFT 250 ms against a 200 ms SLO (violated), TPOT 900 ms / 9 = 100 ms against 500 ms (met)
    assert serve(scheduler, clock, request(1, x_slo_ttft_ms="200", x_slo_tpot_ms="500"), 0.25, 0.9, 10) == (
        FAST.address
    )
    # TTFT 50 ms, one output token (no TPOT), no SLO headers
    serve(scheduler, clock, request(2), 0.05, 0.01, 1)
    old, new = naming is not Naming.LLM_D, naming is not Naming.INFERENCE
    inference, llmd = MODELS, {**PLUGIN, **MODELS}

    def check(name: str, labels: dict[str, str], want: float | None, exported: bool) -> None:
        got = value(registry, name, **labels)
        if not exported:
            assert got is None, name
        else:
            assert got == pytest.approx(want), (name, got)

    # actual TTFT / TPOT: deprecated names only (llm-d's are the picker-wide request_ttft_seconds)
    check("inference_objective_request_ttft_seconds_count", inference, 2, old)
    check("inference_objective_request_ttft_seconds_sum", inference, 0.30, old)
    check("inference_objective_request_tpot_seconds_count", inference, 1, old)
    check("inference_objective_request_tpot_seconds_sum", inference, 0.1, old)
    check("inference_objective_request_tpot_seconds_bucket", {**inference, "le": "0.08"}, 0, old)
    check("inference_objective_request_tpot_seconds_bucket", {**inference, "le": "0.125"}, 1, old)
    assert value(registry, "llm_d_epp_request_ttft_seconds_count", **MODELS) is None
    # predictions of the endpoint that served, alongside each actual value
    for prefix, labels, exported in (("inference_objective", inference, old), ("llm_d_epp", llmd, new)):
        check(f"{prefix}_request_predicted_ttft_seconds_count", labels, 2, exported)
        got = value(registry, f"{prefix}_request_predicted_ttft_seconds_sum", **labels)
        assert got is None if not exported else got == pytest.approx(0.2, rel=0.1)
        check(f"{prefix}_request_predicted_tpot_seconds_count", labels, 1, exported)
        got = value(registry, f"{prefix}_request_predicted_tpot_seconds_sum", **labels)
        assert got is None if not exported else got == pytest.approx(0.01, rel=0.1)
        # one prediction per scheduling cycle, into both duration histograms
        for kind in ("ttft", "tpot"):
            check(f"{prefix}_request_{kind}_prediction_duration_seconds_count", labels, 2, exported)
        # the TTFT SLO was violated once; the TPOT SLO was met
        check(f"{prefix}_request_slo_violation_total", {**labels, "type": "ttft"}, 1, exported)
        check(f"{prefix}_request_slo_violation_total", {**labels, "type": "tpot"}, None, False)
        # the gauge keeps the last value per type
        gauge = f"{prefix}_inference_request_metric"
        check(gauge, {**labels, "type": "ttft"}, 0.05, exported)
        check(gauge, {**labels, "type": "tpot"}, 0.1, exported)
        check(gauge, {**labels, "type": "ttft_slo_violation"}, 1, exported)
        check(gauge, {**labels, "type": "tpot_slo_violation"}, 0, exported)
        got = value(registry, gauge, **labels, type="predicted_ttft")
        assert got is None if not exported else got == pytest.approx(0.1, rel=0.1)
        got = value(registry, gauge, **labels, type="ttft_prediction_duration")
        assert got is None if not exported else 0 <= got < 1


def test_a_cold_model_records_predictions_as_zero_and_no_prediction_duration() -> None:
    registry, clock = CollectorRegistry(), Clock()  # upstream's cold start: no prior, no predictions
    config = CONFIG.replace("{streamingMode: true}", "{streamingMode: true, coldStartPrior: false}")
    observer = SchedulerMetrics(registry, naming=Naming.BOTH)
    scheduler = load_config_text(config, clock=clock).build_scheduler(observer=observer)
    serve(scheduler, clock, request(1, x_slo_ttft_ms="1000"), 0.2, 0.3, 4)
    labels = {**PLUGIN, **MODELS}
    assert value(registry, "llm_d_epp_request_predicted_ttft_seconds_count", **labels) == 1
    assert value(registry, "llm_d_epp_request_predicted_ttft_seconds_sum", **labels) == 0
    assert value(registry, "llm_d_epp_request_predicted_tpot_seconds_sum", **labels) == 0
    assert value(registry, "inference_objective_request_ttft_seconds_sum", **MODELS) == pytest.approx(0.2)
    assert value(registry, "inference_objective_request_tpot_seconds_sum", **MODELS) == pytest.approx(0.1)
    assert value(registry, "llm_d_epp_request_ttft_prediction_duration_seconds_count", **labels) is None
    assert value(registry, "llm_d_epp_inference_request_metric", **labels, type="ttft_slo_violation") == 0
    assert value(registry, "llm_d_epp_request_slo_violation_total", **labels, type="ttft") is None


def test_failed_requests_and_non_streaming_tpot_are_not_recorded() -> None:
    registry, clock = CollectorRegistry(), Clock()
    config = CONFIG.replace("parameters: {streamingMode: true}", "parameters: {}")
    scheduler = load_config_text(config, clock=clock).build_scheduler(observer=SchedulerMetrics(registry))
    serve(scheduler, clock, request(1), 0.2, 0.3, 4)  # non-streaming: TTFT is end to end, no TPOT
    r = request(2)
    result = scheduler.schedule(r, [FAST])
    scheduler.dispatched(r, result)
    clock.now += 1.0
    scheduler.completed(r, result, Completion(Outcome.UPSTREAM_ERROR, status_code=500))
    assert value(registry, "inference_objective_request_ttft_seconds_count", **MODELS) == 1
    assert value(registry, "inference_objective_request_ttft_seconds_sum", **MODELS) == pytest.approx(0.5)
    assert value(registry, "inference_objective_request_tpot_seconds_count", **MODELS) is None


def test_without_a_latency_metrics_observer_nothing_is_kept() -> None:
    scheduler = load_config_text(CONFIG).build_scheduler()
    producer = next(p for p in scheduler.plugins if isinstance(p, PredictedLatencyProducer))
    train(producer)
    r = request(1)
    scheduler.schedule(r, [FAST, replace(SLOW)])
    assert producer._predicted == {} and producer._metrics is None
