"""Prometheus metrics of the picker, with the Go endpoint picker's names (drop-in dashboards).

Per-request metrics (``inference_objective_*``) are recorded by :class:`RequestMetrics` through
label children bound once per (model, target model[, priority]) and cached, so a request costs a few
dict lookups and ``inc``/``observe`` calls. Scheduler metrics (``inference_extension_*``) are fed by
:class:`SchedulerMetrics`, which implements the scheduler's observer seam. Pool gauges
(``inference_pool_*``) and the saturation gauge are computed at scrape time by
:class:`epp.server.pool_metrics.PoolCollector` from the data layer's snapshot, never per request.

Normalised time per output token (NTPOT) = (completion time - receive time) / output tokens, observed
only for successful requests that reported output tokens. The flow-control queue-duration histogram
has no observations: flow control is not implemented yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from epp.server.fastmetrics import FastCounter as Counter
from epp.server.fastmetrics import FastGauge
from epp.server.fastmetrics import FastHistogram as Histogram
from scheduler.types import Completion, Outcome, Usage

__all__ = ["RequestMetrics", "SchedulerMetrics", "register_info"]

_SIZE_BUCKETS = tuple(float(2**i) for i in range(6, 31, 2))  # 64 B .. 1 GiB
_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
_LATENCY_BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20,
                    30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600)  # fmt: skip
_NTPOT_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)
_SCHED_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
_PLUGIN_BUCKETS = (1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 5e-3, 1e-2, 0.1)
_RATIO_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

_MODEL_TARGET = ("model_name", "target_model_name")
_OK = Outcome.OK  # a global is cheaper than an Enum member


class _Children:
    """Label children of one (model, target model): bound once, reused by every request."""

    __slots__ = ("cached", "duration", "input", "ntpot", "output", "req_size", "resp_size", "running")

    def __init__(self, m: RequestMetrics, model: str, target: str) -> None:
        self.duration = m.duration.labels(model, target)
        self.req_size = m.request_sizes.labels(model, target)
        self.resp_size = m.response_sizes.labels(model, target)
        self.input = m.input_tokens.labels(model, target)
        self.output = m.output_tokens.labels(model, target)
        self.cached = m.cached_tokens.labels(model, target)
        self.ntpot = m.ntpot.labels(model, target)
        self.running = m.running.labels(model)


class RequestMetrics:
    """``inference_objective_*``: one instance per registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        p = "inference_objective_"

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(p + name, doc, _MODEL_TARGET, buckets=buckets, registry=registry)

        self.total = Counter(
            p + "request", "Requests received", (*_MODEL_TARGET, "priority"), registry=registry
        )
        self.errors = Counter(
            p + "request_error", "Requests that failed", (*_MODEL_TARGET, "error_code"), registry=registry
        )
        self.duration = hist("request_duration_seconds", "End-to-end request latency", _LATENCY_BUCKETS)
        self.request_sizes = hist("request_sizes", "Request body size in bytes", _SIZE_BUCKETS)
        self.response_sizes = hist("response_sizes", "Response body size in bytes", _SIZE_BUCKETS)
        self.input_tokens = hist("input_tokens", "Prompt tokens per request", _TOKEN_BUCKETS)
        self.output_tokens = hist("output_tokens", "Output tokens per request", _TOKEN_BUCKETS)
        self.cached_tokens = hist("prompt_cached_tokens", "Prompt tokens served from cache", _TOKEN_BUCKETS)
        self.running = FastGauge(
            p + "running_requests", "Requests in flight", ("model_name",), registry=registry
        )
        self.ntpot = hist(
            "normalized_time_per_output_token_seconds", "Request latency / output tokens", _NTPOT_BUCKETS
        )
        self._children: dict[tuple[str, str], _Children] = {}
        self._totals: dict[tuple[str, str, int], Any] = {}

    def _bound(self, model: str, target: str) -> _Children:
        key = (model, target)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = _Children(self, model, target)
        return children

    def received(self, model: str, target: str, priority: int, body_size: int) -> None:
        """A request was parsed and is about to be scheduled."""
        key = (model, target, priority)
        counter = self._totals.get(key)
        if counter is None:
            counter = self._totals[key] = self.total.labels(model, target, str(priority))
        counter.inc()
        self._bound(model, target).req_size.observe(body_size)

    def dispatched(self, model: str, target: str) -> None:
        self._bound(model, target).running.inc()

    def failed(self, model: str, target: str, error_code: str) -> None:
        self.errors.labels(model, target, error_code).inc()

    def completed(
        self, model: str, target: str, completion: Completion, seconds: float, response_bytes: int | None
    ) -> None:
        """A dispatched request ended (any outcome); ``seconds`` since it was received.

        ``response_bytes`` None: the stream did not see the response body (its size and usage are
        recorded by :meth:`observed` when an observer stream reports them).
        """
        c = self._bound(model, target)
        c.running.dec()
        if completion.outcome is not _OK:
            code = (
                f"upstream_{completion.status_code}" if completion.status_code else completion.outcome.value
            )
            self.failed(model, target, code)
            return
        c.duration.observe(seconds)
        if response_bytes is not None:
            self._usage(c, completion.usage, seconds, response_bytes)

    def observed(self, model: str, target: str, usage: Usage, seconds: float, response_bytes: int) -> None:
        """An observer stream saw a successful response end, ``seconds`` after the request was received."""
        self._usage(self._bound(model, target), usage, seconds, response_bytes)

    @staticmethod
    def _usage(c: _Children, usage: Usage, seconds: float, response_bytes: int) -> None:
        c.resp_size.observe(response_bytes)
        if usage.prompt_tokens:
            c.input.observe(usage.prompt_tokens)
            c.cached.observe(usage.cached_tokens)
        if usage.completion_tokens:
            c.output.observe(usage.completion_tokens)
            c.ntpot.observe(seconds / usage.completion_tokens)


class SchedulerMetrics:
    """``inference_extension_*`` scheduler metrics; implements the scheduler's observer protocol."""

    def __init__(
        self, registry: CollectorRegistry, on_plugin_error: Callable[..., None] | None = None
    ) -> None:
        p = "inference_extension_"
        self.e2e = Histogram(
            p + "scheduler_e2e_duration_seconds", "Scheduling cycle latency", buckets=_SCHED_BUCKETS,
            registry=registry,
        )  # fmt: skip
        self.attempts = Counter(p + "scheduler_attempts", "Scheduling cycles", ("status",), registry=registry)
        self.plugin = Histogram(
            p + "plugin_duration_seconds", "Latency of one plugin call",
            ("extension_point", "plugin_type", "plugin_name"), buckets=_PLUGIN_BUCKETS, registry=registry,
        )  # fmt: skip
        self.plugin_errors = Counter(
            p + "plugin_errors", "Plugin calls that raised",
            ("extension_point", "plugin_type", "plugin_name"), registry=registry,
        )  # fmt: skip
        self.hit_ratio = Histogram(
            p + "prefix_indexer_hit_ratio", "Prefix-cache hit ratio of the chosen endpoint per request",
            buckets=_RATIO_BUCKETS, registry=registry,
        )  # fmt: skip
        # Flow control (request queueing) is not implemented yet: this histogram has no observations.
        self.queue_duration = Histogram(
            p + "flow_control_request_queue_duration_seconds", "Time requests spent in flow-control queues",
            buckets=_LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self._status = {
            "ok": self.attempts.labels("success"),
            "no_endpoint": self.attempts.labels("failure"),
            "error": self.attempts.labels("failure"),
        }
        self._plugins: dict[tuple[str, str, str], Any] = {}
        self._on_plugin_error = on_plugin_error

    def observe_plugin(
        self, extension_point: str, plugin_type: str, plugin_name: str, seconds: float
    ) -> None:
        key = (extension_point, plugin_type, plugin_name)
        child = self._plugins.get(key)
        if child is None:
            child = self._plugins[key] = self.plugin.labels(*key)
        child.observe(seconds)

    def observe_cycle(self, seconds: float, status: str) -> None:
        self.e2e.observe(seconds)
        child = self._status.get(status) or self.attempts.labels("failure")
        child.inc()

    def plugin_error(
        self, extension_point: str, plugin_type: str, plugin_name: str, error: BaseException
    ) -> None:
        self.plugin_errors.labels(extension_point, plugin_type, plugin_name).inc()
        if self._on_plugin_error is not None:
            self._on_plugin_error(extension_point, plugin_type, plugin_name, error)


def register_info(registry: CollectorRegistry, commit: str, build_ref: str) -> None:
    """``inference_extension_info{commit,build_ref} 1``."""
    Gauge("inference_extension_info", "Build information", ("commit", "build_ref"), registry=registry).labels(
        commit, build_ref
    ).set(1)
