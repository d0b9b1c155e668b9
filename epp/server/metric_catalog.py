"""The upstream endpoint picker's Prometheus metric families, under both naming schemes.

llm-d-router (``pkg/epp/metrics``, commit ebab687927f5331c1b39defcb579a07951bce56c) exposes every family
under its current ``llm_d_epp_*`` name and, where an older name existed, also under that deprecated name
(``inference_objective_*``, ``inference_pool_*``, ``inference_extension_*``,
``llm_d_inference_scheduler_*``): "dual emission", with no switch. GIE's last endpoint picker (commit
1748e829d1161147aaf35e76699ec86fd88406d2) has only the ``inference_*`` names. ``--metrics-naming``
chooses what this picker exposes: ``both`` (default, as llm-d-router), ``llm-d`` (current names only) or
``inference`` (the deprecated names only, GIE's dashboards).

Each :class:`Family` is one metric and carries its name, type, label names and buckets per scheme (the
two schemes differ in labels, e.g. the ``llm_d_epp_request_*`` families add ``fairness_id``). Names,
labels and buckets are upstream's; the help texts are ours and say the same. Counters are named here
without ``_total`` (the exposition adds it). ``tests/epp/server/upstream_metrics.txt`` is the checked-in
upstream list (with source paths) that a test compares with this catalog.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["CATALOG", "NOT_EXPOSED", "OPT_IN", "Family", "Naming", "Scheme", "by_key"]


class Naming(enum.Enum):
    """``--metrics-naming``: which of the two names of each family is exported."""

    BOTH = "both"
    LLM_D = "llm-d"
    INFERENCE = "inference"

    def exports(self, scheme: Scheme) -> bool:
        return self is Naming.BOTH or self.value == scheme.value


class Scheme(enum.Enum):
    LLM_D = "llm-d"
    INFERENCE = "inference"


@dataclass(frozen=True, slots=True)
class Family:
    """One upstream metric; ``llmd`` / ``inference`` are its names (None: not under that scheme)."""

    key: str
    kind: str  # "counter" | "gauge" | "histogram"
    help: str
    llmd: str | None
    llmd_labels: tuple[str, ...]
    inference: str | None = None
    inference_labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    def name(self, scheme: Scheme) -> str | None:
        return self.llmd if scheme is Scheme.LLM_D else self.inference

    def labels(self, scheme: Scheme) -> tuple[str, ...]:
        return self.llmd_labels if scheme is Scheme.LLM_D else self.inference_labels


_M2 = ("model_name", "target_model_name")
_M4 = (*_M2, "fairness_id", "priority")
_POOL = ("name",)
_PLUGIN = ("extension_point", "plugin_type", "plugin_name")
_DECISION = ("plugin_name", "plugin_type", "model_name", "decision_type")
_PL = ("plugin_name", "plugin_type", *_M2)
_INFLIGHT = ("endpoint_name", "namespace", "producer_name", "fairness_id", "priority")

_GENERAL_LATENCY = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10,
                    15, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700,
                    3600)  # fmt: skip
_REQUEST_SIZE = tuple(float(2**i) for i in range(6, 31))  # 64 B .. 1 GiB, every power of two
_RESPONSE_SIZE = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536)
_LONG_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072,
                262144, 524288, 1048576)  # fmt: skip
_OUTPUT_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
_NTPOT = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_TTFT = _GENERAL_LATENCY[:24]  # 5 ms .. 120 s
_TPOT = (0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6,
         0.8, 1, 2)  # fmt: skip
# predictedlatency/metrics.go's tpotBuckets (its actual and predicted TPOT histograms)
_PL_TPOT = (0.0005, 0.00205, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.3, 0.4, 0.5,
            0.6, 0.8, 1, 1.5, 2, 3, 4.5, 6, 12, 18, 24, 30, 36, 48, 60, 90, 120, 180, 270, 360)  # fmt: skip
_PREDICTION = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
_ITL = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2)
_FAST = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
_REQ_PROCESSING = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   10)  # fmt: skip
_RESP_PROCESSING = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                    2.5, 5)  # fmt: skip
_QUEUE = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_REVOCATION = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_RATIO = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_HIT_BYTES = (0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_STREAM = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600)

_E = "llm_d_epp_"
_O = "inference_objective_"
_P = "inference_pool_"
_X = "inference_extension_"
_FC = "flow_control_"

CATALOG: tuple[Family, ...] = (
    # --- requests and latency
    Family("request_total", "counter", "Requests received, by model, target model and priority.",
           _E + "request", _M4, _O + "request", (*_M2, "priority")),
    Family("request_error_total", "counter", "Requests that ended in an error, by upstream error code.",
           _E + "request_error", (*_M4, "error_code"), _O + "request_error", (*_M2, "error_code")),
    Family("request_duration_seconds", "histogram", "End-to-end request latency in seconds.",
           _E + "request_duration_seconds", _M4, _O + "request_duration_seconds", _M2, _GENERAL_LATENCY),
    Family("request_size", "histogram", "Request body size in bytes.",
           _E + "request_size_bytes", _M4, _O + "request_sizes", _M2, _REQUEST_SIZE),
    Family("response_size", "histogram", "Response body size in bytes.",
           _E + "response_size_bytes", _M4, _O + "response_sizes", _M2, _RESPONSE_SIZE),
    Family("input_tokens", "histogram", "Prompt tokens per request, as the model server reported them.",
           _E + "request_input_tokens", _M4, _O + "input_tokens", _M2, _LONG_TOKENS),
    Family("output_tokens", "histogram", "Output tokens per request, as the model server reported them.",
           _E + "request_output_tokens", _M4, _O + "output_tokens", _M2, _OUTPUT_TOKENS),
    Family("cached_tokens", "histogram", "Prompt tokens the model server read from its cache, per request.",
           _E + "request_cached_tokens", _M4, _O + "prompt_cached_tokens", _M2, _LONG_TOKENS),
    Family("running", "gauge", "Requests in flight (dispatched, not yet completed).",
           _E + "request_running", _M4, _O + "running_requests", ("model_name",)),
    Family("ntpot", "histogram", "Request latency divided by output tokens, in seconds.",
           _E + "request_ntpot_seconds", _M4, _O + "normalized_time_per_output_token_seconds", _M2, _NTPOT),
    Family("ttft", "histogram",
           "Seconds from request receipt to the first response body byte (non-streaming: the whole body).",
           _E + "request_ttft_seconds", (*_M4, "streaming"), buckets=_TTFT),
    Family("tpot", "histogram",
           "Streaming responses: (end-to-end latency - TTFT) / (output tokens - 1), in seconds.",
           _E + "request_streaming_tpot_seconds", _M4, buckets=_TPOT),
    Family("itl", "histogram", "Streaming responses: seconds between consecutive response body chunks.",
           _E + "request_streaming_itl_seconds", _M4, buckets=_ITL),
    # --- pool (computed at scrape time)
    Family("pool_avg_kv", "gauge", "Mean KV-cache utilisation of the pool's endpoints with fresh metrics.",
           _E + "average_kv_cache_utilization", _POOL, _P + "average_kv_cache_utilization", _POOL),
    Family("pool_avg_queue", "gauge", "Mean waiting queue of the pool's endpoints with fresh metrics.",
           _E + "average_queue_size", _POOL, _P + "average_queue_size", _POOL),
    Family("pool_avg_running", "gauge", "Mean running requests of the pool's endpoints with fresh metrics.",
           _E + "average_running_requests", _POOL, _P + "average_running_requests", _POOL),
    Family("pool_std_kv", "gauge", "Sample standard deviation of the endpoints' KV-cache utilisation.",
           _E + "std_dev_kv_cache_utilization", _POOL),
    Family("pool_std_queue", "gauge", "Sample standard deviation of the endpoints' waiting queues.",
           _E + "std_dev_queue_size", _POOL),
    Family("pool_std_running", "gauge", "Sample standard deviation of the endpoints' running requests.",
           _E + "std_dev_running_requests", _POOL),
    Family("pool_ready", "gauge", "Endpoints of the pool with fresh metrics.",
           _E + "ready_endpoints", _POOL, _P + "ready_pods", _POOL),
    Family("pool_per_endpoint_queue", "gauge", "Waiting queue of each endpoint of the pool.",
           _E + "per_endpoint_queue_size", ("name", "model_server_endpoint"),
           _P + "per_pod_queue_size", ("name", "model_server_pod")),
    # --- scheduler, plugins, picker overhead, build
    Family("scheduler_e2e", "histogram", "Seconds one scheduling cycle took.",
           _E + "scheduler_e2e_duration_seconds", (), _X + "scheduler_e2e_duration_seconds", (), _FAST),
    Family("scheduler_attempts", "counter", "Scheduling cycles by status and the chosen primary endpoint.",
           _E + "scheduler_attempts", ("status", "target_model_name", "endpoint_name", "namespace", "port"),
           _X + "scheduler_attempts", ("status", "target_model_name", "pod_name", "namespace", "port")),
    Family("plugin_duration", "histogram", "Seconds one plugin call took.",
           _E + "plugin_duration_seconds", _PLUGIN, _X + "plugin_duration_seconds", _PLUGIN, _FAST),
    Family("plugin_data_scope_violations", "counter",
           "Endpoint attribute accesses rejected because the plugin did not declare the data key.",
           _E + "plugin_data_scope_violations", (*_PLUGIN, "access")),
    Family("request_processing", "histogram",
           "Seconds from request receipt until its body was handled (routed or answered).",
           _E + "request_processing_duration_seconds", (), buckets=_REQ_PROCESSING),
    Family("response_processing", "histogram",
           "Seconds the picker spent handling a response: summed per-message handling time.",
           _E + "response_processing_duration_seconds", (), buckets=_RESP_PROCESSING),
    Family("info", "gauge", "Build information of the picker.",
           _E + "info", ("commit", "build_ref"), _X + "info", ("commit", "build_ref")),
    Family("model_rewrite_decisions", "counter", "Decisions of InferenceModelRewrite rules.",
           _E + "model_rewrite_decisions", ("model_rewrite_name", "model_name", "target_model"),
           _X + "model_rewrite_decisions", ("model_rewrite_name", "model_name", "target_model")),
    # --- data layer
    Family("datalayer_poll_errors", "counter", "Data-source polls that failed, by source type.",
           _E + "datalayer_poll_errors", ("source_type",),
           "llm_d_inference_scheduler_datalayer_poll_errors", ("source_type",)),
    Family("datalayer_extract_errors", "counter", "Extractor failures, by source and extractor type.",
           _E + "datalayer_extract_errors", ("source_type", "extractor_type"),
           "llm_d_inference_scheduler_datalayer_extract_errors", ("source_type", "extractor_type")),
    # --- approximate prefix cache
    Family("prefix_size", "gauge", "Entries in the approximate prefix-cache index.",
           _E + "prefix_indexer_size", ("plugin_name", "plugin_type"), _X + "prefix_indexer_size", ()),
    Family("prefix_hit_ratio", "histogram", "Matched prefix length / prompt prefix length, per request.",
           _E + "prefix_indexer_hit_ratio", ("plugin_name", "plugin_type"), _X + "prefix_indexer_hit_ratio",
           (), _RATIO),
    Family("prefix_hit_bytes", "histogram", "Matched prefix length in bytes (4 per token), per request.",
           _E + "prefix_indexer_hit_bytes", ("plugin_name", "plugin_type"), _X + "prefix_indexer_hit_bytes",
           (), _HIT_BYTES),
    # --- flow control (request queueing; sampled while the flowControl gate is on; in-flight eviction:
    # never sampled, not implemented)
    Family("fc_queue_duration", "histogram", "Seconds requests spent in flow control, enqueue to outcome.",
           _E + _FC + "request_queue_duration_seconds",
           ("fairness_id", "priority", "outcome", "inference_pool", *_M2),
           _X + _FC + "request_queue_duration_seconds",
           ("fairness_id", "priority", "outcome", "inference_pool", *_M2), _QUEUE),
    Family("fc_dispatch_cycle", "histogram", "Seconds one flow-control dispatch cycle took.",
           _E + _FC + "dispatch_cycle_duration_seconds", (),
           _X + _FC + "dispatch_cycle_duration_seconds", (), _FAST),
    Family("fc_enqueue_duration", "histogram", "Seconds taken to enqueue a request into flow control.",
           _E + _FC + "request_enqueue_duration_seconds", ("fairness_id", "priority", "outcome"),
           _X + _FC + "request_enqueue_duration_seconds", ("fairness_id", "priority", "outcome"), _FAST),
    Family("fc_queue_size", "gauge", "Requests held in flow-control queues.",
           _E + _FC + "queue_size", ("fairness_id", "priority", "inference_pool", *_M2),
           _X + _FC + "queue_size", ("fairness_id", "priority", "inference_pool", *_M2)),
    Family("fc_queue_bytes", "gauge", "Bytes of requests held in flow-control queues.",
           _E + _FC + "queue_bytes", ("fairness_id", "priority", "inference_pool", *_M2),
           _X + _FC + "queue_bytes", ("fairness_id", "priority", "inference_pool", *_M2)),
    Family("fc_pool_saturation", "gauge",
           "Pool saturation by stage (1.0 is the gating set point; 'effective' gates dispatch).",
           _E + _FC + "pool_saturation", ("inference_pool", "stage"),
           _X + _FC + "pool_saturation", ("inference_pool", "stage")),
    Family("fc_stale_endpoints", "gauge", "Candidate endpoints whose metrics were missing or stale.",
           _E + _FC + "stale_endpoints", ("detector",)),
    Family("fc_capacity_requests", "gauge", "Fraction of a priority band's request capacity in use.",
           _E + _FC + "capacity_utilization_requests", ("priority", "inference_pool")),
    Family("fc_capacity_bytes", "gauge", "Fraction of a priority band's byte capacity in use.",
           _E + _FC + "capacity_utilization_bytes", ("priority", "inference_pool")),
    Family("fc_global_capacity_requests", "gauge", "Fraction of the global request capacity in use.",
           _E + _FC + "global_capacity_utilization_requests", ("inference_pool",)),
    Family("fc_global_capacity_bytes", "gauge", "Fraction of the global byte capacity in use.",
           _E + _FC + "global_capacity_utilization_bytes", ("inference_pool",)),
    Family("fc_requests", "counter", "Requests that reached a terminal flow-control outcome.",
           _E + _FC + "requests", ("outcome", "priority", "inference_pool")),
    Family("fc_revocations_issued", "counter", "In-flight eviction revocations issued.",
           _E + _FC + "revocations_issued", ("priority", "inference_pool")),
    Family("fc_revocations", "counter", "In-flight eviction revocations by terminal outcome.",
           _E + _FC + "revocations", ("outcome", "inference_pool")),
    Family("fc_reclaim_target", "gauge", "Last computed reclamation deficit (saturation units).",
           _E + _FC + "reclaim_target", ("inference_pool",)),
    Family("fc_pending_reclaim", "gauge", "Outstanding pending-reclaim debits (saturation units).",
           _E + _FC + "pending_reclaim", ("inference_pool",)),
    Family("fc_revocation_confirmation", "histogram", "Seconds from revocation to stream end.",
           _E + _FC + "revocation_confirmation_seconds", ("inference_pool",), buckets=_REVOCATION),
    # --- plugin-owned (registered by the plugin upstream; here always, with samples once a plugin reports)
    Family("pd_decision", "counter", "pd-profile-handler decisions: decode-only or prefill-decode.",
           _E + "pd_decision", _DECISION, "llm_d_inference_scheduler_pd_decision", _DECISION[2:]),
    Family("disagg_decision", "counter",
           "disagg-profile-handler routing decisions, by the stages used (decode-only, prefill-decode, "
           "encode-decode, encode-prefill-decode).",
           _E + "disagg_decision", _DECISION, "llm_d_inference_scheduler_disagg_decision", _DECISION[2:]),
    Family("inflight_requests", "gauge",
           "Requests in flight per endpoint, as the inflight-load-producer counts.",
           _E + "inflight_requests", _INFLIGHT),
    Family("inflight_tokens", "gauge",
           "Tokens in flight per endpoint (uncached prompt tokens, plus the output estimate when enabled), "
           "as the inflight-load-producer counts.",
           _E + "inflight_tokens", _INFLIGHT),
    # predicted-latency-producer (predictedlatency/metrics.go): fed per request the producer tracked.
    # The actual TTFT/TPOT histograms have only the deprecated name (llm-d-router points them at the
    # picker-wide llm_d_epp_request_ttft_seconds / request_streaming_tpot_seconds above).
    Family("pl_ttft", "histogram",
           "predicted-latency-producer: actual TTFT in seconds (dispatch to first chunk, or to the end "
           "of the response outside streaming mode).",
           None, (), _O + "request_ttft_seconds", _M2, _GENERAL_LATENCY),
    Family("pl_tpot", "histogram",
           "predicted-latency-producer (streaming mode): actual TPOT in seconds, (end - first chunk) / "
           "(output tokens - 1).",
           None, (), _O + "request_tpot_seconds", _M2, _PL_TPOT),
    Family("pl_predicted_ttft", "histogram",
           "TTFT predicted at scheduling time for the endpoint that served the request, in seconds.",
           _E + "request_predicted_ttft_seconds", _PL, _O + "request_predicted_ttft_seconds", _M2,
           _GENERAL_LATENCY),
    Family("pl_predicted_tpot", "histogram",
           "TPOT predicted at scheduling time for the endpoint that decoded the request, in seconds.",
           _E + "request_predicted_tpot_seconds", _PL, _O + "request_predicted_tpot_seconds", _M2,
           _PL_TPOT),
    Family("pl_ttft_prediction_duration", "histogram",
           "Seconds one scheduling cycle's TTFT predictions (all candidates) took.",
           _E + "request_ttft_prediction_duration_seconds", _PL,
           _O + "request_ttft_prediction_duration_seconds", _M2, _PREDICTION),
    Family("pl_tpot_prediction_duration", "histogram",
           "Seconds one scheduling cycle's TPOT predictions (all candidates) took.",
           _E + "request_tpot_prediction_duration_seconds", _PL,
           _O + "request_tpot_prediction_duration_seconds", _M2, _PREDICTION),
    Family("pl_slo_violation", "counter",
           "Requests whose actual TTFT or TPOT exceeded their x-slo-ttft-ms / x-slo-tpot-ms header, by type.",
           _E + "request_slo_violation", (*_PL, "type"), _O + "request_slo_violation", (*_M2, "type")),
    Family("pl_request_metric", "gauge",
           "The last request's value per type: ttft, predicted_ttft, ttft_prediction_duration, "
           "ttft_slo_violation (1/0), and the same for tpot.",
           _E + "inference_request_metric", (*_PL, "type"), _O + "inference_request_metric",
           (*_M2, "type")),
    Family("program_attained_service", "gauge",
           "Time-decayed attained service (weighted tokens consumed) per program, as of its last "
           "completion (program-aware-fairness).",
           _E + "program_aware_attained_service_tokens", ("program_id",)),
    Family("program_avg_wait", "gauge",
           "Running mean of the flow-control queue wait per program in milliseconds "
           "(program-aware-fairness).",
           _E + "program_aware_avg_wait_time_milliseconds", ("program_id",)),
    Family("program_fairness_index", "gauge",
           "Jain's fairness index over the programs' mean waits (1.0: equal) (program-aware-fairness).",
           _E + "program_aware_jains_fairness_index", ()),
    # --- ext_proc streams (upstream: only with --enable-grpc-stream-metrics)
    Family("extproc_streams_inflight", "gauge", "ext_proc gRPC streams open now.",
           _E + "extproc_streams_inflight", ()),
    Family("extproc_stream_duration", "histogram", "Seconds an ext_proc gRPC stream stayed open.",
           _E + "extproc_stream_duration_seconds", (), buckets=_STREAM),
    Family("extproc_streams_total", "counter", "ext_proc gRPC streams completed, by gRPC status code.",
           _E + "extproc_streams", ("code",)),
)  # fmt: skip

# Families the picker does not register, and why (each a feature upstream gates or this picker lacks).
NOT_EXPOSED: dict[str, str] = {
    "plugin_data_scope_violations": "no plugin here declares data keys, so no access can be rejected",
}

# Families registered only with a flag, as upstream.
OPT_IN: dict[str, str] = {
    "extproc_streams_inflight": "--enable-grpc-stream-metrics",
    "extproc_stream_duration": "--enable-grpc-stream-metrics",
    "extproc_streams_total": "--enable-grpc-stream-metrics",
}

_BY_KEY = {f.key: f for f in CATALOG}


def by_key(key: str) -> Family:
    """The family ``key`` (KeyError for an unknown key)."""
    return _BY_KEY[key]
