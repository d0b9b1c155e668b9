"""What each metric observes: error codes, response latencies, processing times, prefix hits, pool
summaries, label bounds, naming schemes."""

from __future__ import annotations

import orjson
import pytest
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3.external_processor_pb2 import HttpHeaders, ProcessingRequest
from prometheus_client import CollectorRegistry, generate_latest
from srv_helpers import FakeScheduler, StaticSource, request_body, request_headers, response_body

from epp.admission import Admitter
from epp.protocol import SessionConfig
from epp.server.metric_catalog import Naming
from epp.server.metrics import (
    LABEL_CAP,
    OVERFLOW,
    RequestMetrics,
    SchedulerMetrics,
    StreamMetrics,
    error_code,
)
from epp.server.pool_metrics import PoolCollector, mean_and_stdev
from epp.server.prefix_stats import index_sizes_reader, prefix_hit_recorder
from epp.server.routing import Router
from epp.server.stream import StreamCore
from scheduler.config import load_config_text
from scheduler.types import Completion, Endpoint, LLMRequest, Metrics, Outcome, SchedulingResult

LLMD = {"model_name": "m1", "target_model_name": "m1", "fairness_id": "default-flow", "priority": "0"}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _response_headers(content_type: str) -> ProcessingRequest:
    headers = [HeaderValue(key=":status", raw_value=b"200"),
               HeaderValue(key="content-type", raw_value=content_type.encode())]  # fmt: skip
    return ProcessingRequest(response_headers=HttpHeaders(headers=HeaderMap(headers=headers)))


def _core(clock: Clock, registry: CollectorRegistry) -> StreamCore:
    metrics = RequestMetrics(registry)
    router = Router(StaticSource(), Admitter(None, lambda: 1.0), FakeScheduler(), metrics, clock=clock)
    return StreamCore(SessionConfig(), router, metrics, clock=clock)


def _value(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float | None:
    return registry.get_sample_value(name, labels or {})


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "BadRequest"), (401, "Unauthorized"), (403, "Forbidden"), (404, "NotFound"),
     (412, "PreconditionFailed"), (429, "ResourceExhausted"), (500, "Internal"),
     (503, "ServiceUnavailable"), (502, "Unknown")],
)  # fmt: skip
def test_error_codes_are_upstreams_by_http_status(status: int, code: str) -> None:
    assert error_code(status) == code


def test_streamed_response_observes_ttft_itl_tpot_and_processing_times() -> None:
    clock, registry = Clock(), CollectorRegistry()
    core = _core(clock, registry)
    stream = core.open()
    stream.feed(request_headers())
    clock.t = 0.002
    stream.feed(request_body(orjson.dumps({"model": "m1", "prompt": "hello", "stream": True})))
    clock.t = 1.0
    stream.feed(_response_headers("text/event-stream"))
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}\n\n'
    for t, chunk, eos in ((1.5, b'data: {"choices":[{"text":"a"}]}\n\n', False),
                          (1.7, b'data: {"choices":[{"text":"b"}]}\n\n', False),
                          (2.0, usage + b"data: [DONE]\n\n", True)):  # fmt: skip
        clock.t = t
        stream.feed(response_body(chunk, end_of_stream=eos))
    assert stream.finished
    ttft = {**LLMD, "streaming": "true"}
    assert _value(registry, "llm_d_epp_request_ttft_seconds_sum", ttft) == 1.5
    assert _value(registry, "llm_d_epp_request_ttft_seconds_count", {**LLMD, "streaming": "false"}) is None
    assert _value(registry, "llm_d_epp_request_streaming_itl_seconds_count", LLMD) == 2
    assert _value(registry, "llm_d_epp_request_streaming_itl_seconds_sum", LLMD) == pytest.approx(0.5)
    # TPOT = (e2e - TTFT) / (output tokens - 1) = (2.0 - 1.5) / 3
    assert _value(registry, "llm_d_epp_request_streaming_tpot_seconds_sum", LLMD) == pytest.approx(0.5 / 3)
    assert _value(registry, "llm_d_epp_request_duration_seconds_sum", LLMD) == 2.0
    assert _value(registry, "llm_d_epp_request_processing_duration_seconds_sum") == 0.002
    assert _value(registry, "llm_d_epp_response_processing_duration_seconds_count") == 1
    assert _value(registry, "llm_d_epp_response_processing_duration_seconds_sum") == 0.0  # no handler time


def test_non_streamed_response_has_ttft_false_no_tpot_and_headers_to_end_processing() -> None:
    clock, registry = Clock(), CollectorRegistry()
    stream = _core(clock, registry).open()
    stream.feed(request_headers())
    stream.feed(request_body(orjson.dumps({"model": "m1", "prompt": "hello"})))
    clock.t = 1.0
    stream.feed(_response_headers("application/json"))
    clock.t = 1.25
    stream.feed(response_body(b'{"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}'))
    ttft = {**LLMD, "streaming": "false"}
    assert _value(registry, "llm_d_epp_request_ttft_seconds_sum", ttft) == 1.25
    assert _value(registry, "llm_d_epp_request_streaming_tpot_seconds_count", LLMD) is None
    assert _value(registry, "llm_d_epp_request_streaming_itl_seconds_count", LLMD) is None
    assert _value(registry, "llm_d_epp_response_processing_duration_seconds_sum") == 0.25
    assert _value(registry, "inference_objective_output_tokens_sum", {"model_name": "m1",
                  "target_model_name": "m1"}) == 4  # fmt: skip


def test_completion_outcomes_map_to_upstream_error_codes() -> None:
    registry = CollectorRegistry()
    m = RequestMetrics(registry)
    c = m.bound("m1", "m1", "default-flow", 0)
    for outcome, status in ((Outcome.UPSTREAM_ERROR, 503), (Outcome.STREAM_RESET, 0), (Outcome.TIMEOUT, 0),
                            (Outcome.CLIENT_CANCEL, 0)):  # fmt: skip
        m.dispatched(c)
        m.completed(c, Completion(outcome, status_code=status), 1.0, None)
    errors = {"ModelServerError": 1.0, "Unknown": 2.0}
    for code, count in errors.items():
        assert _value(registry, "llm_d_epp_request_error_total", {**LLMD, "error_code": code}) == count
    assert _value(registry, "llm_d_epp_request_running", LLMD) == 0
    # a client that went away is not an error upstream
    assert _value(registry, "llm_d_epp_request_error_total", {**LLMD, "error_code": "client_cancel"}) is None


def test_model_and_fairness_labels_are_bounded() -> None:
    registry = CollectorRegistry()
    m = RequestMetrics(registry, Naming.LLM_D)
    for i in range(LABEL_CAP + 5):
        m.received(m.bound(f"model-{i}", f"model-{i}", f"tenant-{i}", 0), 10)
    overflow = {
        "model_name": OVERFLOW,
        "target_model_name": OVERFLOW,
        "fairness_id": OVERFLOW,
        "priority": "0",
    }
    assert _value(registry, "llm_d_epp_request_total", overflow) == 5
    # model and target names share one cap: a new target of a known model folds too
    m.received(m.bound("model-0", "fresh-target", "tenant-0", 0), 10)
    folded = {
        "model_name": "model-0",
        "target_model_name": OVERFLOW,
        "fairness_id": "tenant-0",
        "priority": "0",
    }
    assert _value(registry, "llm_d_epp_request_total", folded) == 1


def test_naming_selects_the_exported_names() -> None:
    for naming, present, absent in (
        (Naming.LLM_D, "llm_d_epp_request_total", "inference_objective_request_total"),
        (Naming.INFERENCE, "inference_objective_request_total", "llm_d_epp_request_total"),
    ):
        registry = CollectorRegistry()
        m = RequestMetrics(registry, naming)
        m.received(m.bound("m1", "m1", "default-flow", 0), 10)
        text = generate_latest(registry).decode()
        assert present in text and absent not in text
    registry = CollectorRegistry()
    m = RequestMetrics(registry)
    m.received(m.bound("m1", "m1", "default-flow", 0), 10)
    assert _value(registry, "llm_d_epp_request_total", LLMD) == 1
    legacy = {"model_name": "m1", "target_model_name": "m1", "priority": "0"}
    assert _value(registry, "inference_objective_request_total", legacy) == 1


def test_scheduling_attempts_name_the_primary_endpoint() -> None:
    registry = CollectorRegistry()
    m = RequestMetrics(registry, namespace="ns1")
    endpoint = Endpoint("10.0.0.7:8200", "pod-7", {}, True, Metrics())
    m.attempt("m1", SchedulingResult("default", (endpoint,), {}))
    m.attempt("m1", None)
    ok = {"status": "success", "target_model_name": "m1", "namespace": "ns1", "port": "8200"}
    assert _value(registry, "llm_d_epp_scheduler_attempts_total", {**ok, "endpoint_name": "pod-7"}) == 1
    assert _value(registry, "inference_extension_scheduler_attempts_total", {**ok, "pod_name": "pod-7"}) == 1
    failed = {"status": "failure", "target_model_name": "m1", "namespace": "", "port": "", "pod_name": ""}
    assert _value(registry, "inference_extension_scheduler_attempts_total", failed) == 1


PREFIX_CONFIG = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-scorer
  parameters: {blockSizeTokens: 4, autoTune: false}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
"""


# llm-d-router's producer model: the scorer reads the producer's index (it has no parameters of its own).
PRODUCER_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters: {blockSizeTokens: 4, autoTune: false}
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
"""


@pytest.mark.parametrize(
    ("text", "block", "owner"),
    [
        (PREFIX_CONFIG, 16, "prefix-cache-scorer"),
        (PRODUCER_CONFIG, 256, "approx-prefix-cache-producer"),  # blocks raised to >= 64 tokens
    ],
)
def test_prefix_hits_are_observed_in_bytes_and_ratio_per_index(text: str, block: int, owner: str) -> None:
    config = load_config_text(text)
    scheduler = config.build_scheduler()
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    observe = prefix_hit_recorder([p.plugin for p in config.plugins], metrics.observe_prefix)
    assert observe is not None
    pool = [Endpoint("10.0.0.1:8000", "a", {}, True, Metrics(updated_at=1.0))]
    prompt = "0123456789abcdef" * (block // 16) * 10  # 10 blocks
    first = LLMRequest("r1", "m", "m", prompt_text=prompt)
    result = scheduler.schedule(first, pool)
    observe(first, result)
    scheduler.dispatched(first, result)
    second = LLMRequest("r2", "m", "m", prompt_text=prompt[: 8 * block] + "z" * 2 * block)  # 8 of 10 held
    observe(second, scheduler.schedule(second, pool))
    labels = {"plugin_name": owner, "plugin_type": owner}  # the index's owner, as upstream
    assert _value(registry, "llm_d_epp_prefix_indexer_hit_bytes_sum", labels) == 8 * block
    assert _value(registry, "llm_d_epp_prefix_indexer_hit_bytes_count", labels) == 2
    assert _value(registry, "llm_d_epp_prefix_indexer_hit_ratio_sum", labels) == pytest.approx(0.8)
    assert _value(registry, "inference_extension_prefix_indexer_hit_bytes_sum") == 8 * block
    sizes = index_sizes_reader([p.plugin for p in config.plugins])()
    assert sizes == [(owner, owner, 10)]  # the first prompt's 10 blocks (the consumer scorer holds none)


PRECISE_PAIR_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSizeTokens: 16, hashSeed: "42"}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
"""


def test_a_scorer_reading_the_precise_producer_is_not_observed() -> None:
    """The precise producer reports no prefix-index stats: its scorer's hits go unobserved (they used to
    raise AttributeError on a missing ``block_chars``) and no index size is reported."""
    config = load_config_text(PRECISE_PAIR_CONFIG)
    registry = CollectorRegistry()
    plugins = [p.plugin for p in config.plugins]
    observe = prefix_hit_recorder(plugins, SchedulerMetrics(registry).observe_prefix)
    assert observe is not None
    pool = [Endpoint("10.0.0.1:8000", "a", {}, True, Metrics(updated_at=1.0))]
    request = LLMRequest("r1", "m", "m", prompt_text="0123456789abcdef" * 40)
    observe(request, config.build_scheduler().schedule(request, pool))
    assert _value(registry, "inference_extension_prefix_indexer_hit_bytes_count") == 0
    assert index_sizes_reader(plugins)() == []


def test_pool_summary_is_upstreams_sample_deviation_rounded() -> None:
    assert mean_and_stdev([1.0, 2.0, 3.0, 4.0]) == (2.5, 1.29)
    assert mean_and_stdev([5.0]) == (5.0, 0.0)
    assert mean_and_stdev([]) == (0.0, 0.0)
    endpoints = [Endpoint(f"10.0.0.{i}:8000", f"p{i}", {}, True, Metrics(waiting_queue_size=q)) for i, q in
                 enumerate((1, 2, 3, 4))]  # fmt: skip
    registry = CollectorRegistry()
    registry.register(PoolCollector("pool", lambda: endpoints, naming=Naming.LLM_D))
    assert _value(registry, "llm_d_epp_std_dev_queue_size", {"name": "pool"}) == 1.29
    assert _value(registry, "llm_d_epp_average_queue_size", {"name": "pool"}) == 2.5
    labels = {"name": "pool", "model_server_endpoint": "p3"}
    assert _value(registry, "llm_d_epp_per_endpoint_queue_size", labels) == 4
    assert _value(registry, "inference_pool_average_queue_size", {"name": "pool"}) is None
    # no saturation detector: no saturation sample (flow-control families stay empty)
    assert "flow_control_pool_saturation{" not in generate_latest(registry).decode()


@pytest.mark.parametrize(
    ("finish", "status", "code"),
    [
        (True, -1, "OK"),
        (False, -1, "Canceled"),  # reset by the proxy
        (False, 3, "InvalidArgument"),  # the engine aborted on a protocol error
    ],
)
def test_stream_metrics_count_streams_by_grpc_code(finish: bool, status: int, code: str) -> None:
    clock, registry = Clock(), CollectorRegistry()
    core = _core(clock, registry)
    core.stream_metrics = StreamMetrics(registry)
    stream = core.open()
    assert _value(registry, "llm_d_epp_extproc_streams_inflight") == 1
    stream.feed(request_headers())
    clock.t = 0.5
    if finish:
        stream.feed(request_body(b"not json"))  # answered: the stream is finished
    stream.end(Outcome.STREAM_RESET, status)
    assert _value(registry, "llm_d_epp_extproc_streams_inflight") == 0
    assert _value(registry, "llm_d_epp_extproc_stream_duration_seconds_sum") == 0.5
    assert _value(registry, "llm_d_epp_extproc_streams_total", {"code": code}) == 1


def test_stream_timeout_is_deadline_exceeded_and_half_close_is_ok() -> None:
    clock, registry = Clock(), CollectorRegistry()
    core = _core(clock, registry)
    core.stream_metrics = StreamMetrics(registry)
    core.open().end(Outcome.TIMEOUT)
    core.open().end(Outcome.CLIENT_CANCEL)
    assert _value(registry, "llm_d_epp_extproc_streams_total", {"code": "DeadlineExceeded"}) == 1
    assert _value(registry, "llm_d_epp_extproc_streams_total", {"code": "OK"}) == 1


def test_stale_endpoints_gauge_counts_what_the_utilization_detector_finds_stale() -> None:
    from epp.app.build import _stale_reader
    from scheduler.plugins.saturation.utilization import UtilizationDetector

    detector = UtilizationDetector("util")
    endpoints = [
        Endpoint("10.0.0.1:8000", "fresh", {}, True, Metrics(updated_at=99.9)),
        Endpoint("10.0.0.2:8000", "old", {}, True, Metrics(updated_at=10.0)),
        Endpoint("10.0.0.3:8000", "never", {}, True, Metrics()),
    ]
    registry = CollectorRegistry()
    saturation = lambda eps: detector.saturation(eps, 100.0)  # noqa: E731
    stale = _stale_reader(detector, lambda: 100.0)
    registry.register(PoolCollector("pool", lambda: endpoints, saturation=saturation, stale=stale))
    assert _value(registry, "llm_d_epp_flow_control_stale_endpoints", {"detector": "util"}) == 2
    effective = {"inference_pool": "pool", "stage": "effective"}
    assert _value(registry, "llm_d_epp_flow_control_pool_saturation", effective) == detector.saturation(
        endpoints, 100.0
    )
    assert _stale_reader(None, lambda: 0.0)(endpoints) is None


def test_empty_body_messages_are_not_first_tokens_or_inter_token_gaps() -> None:
    clock, registry = Clock(), CollectorRegistry()
    stream = _core(clock, registry).open()
    stream.feed(request_headers())
    stream.feed(request_body(orjson.dumps({"model": "m1", "prompt": "hello", "stream": True})))
    stream.feed(_response_headers("text/event-stream"))
    for t, chunk, eos in ((0.5, b"", False), (0.75, b'data: {"choices":[{"text":"a"}]}\n\n', False),
                          (0.9, b"", False), (1.0, b"data: [DONE]\n\n", True)):  # fmt: skip
        clock.t = t
        stream.feed(response_body(chunk, end_of_stream=eos))
    assert _value(registry, "llm_d_epp_request_ttft_seconds_sum", {**LLMD, "streaming": "true"}) == 0.75
    assert _value(registry, "llm_d_epp_request_streaming_itl_seconds_sum", LLMD) == 0.25
