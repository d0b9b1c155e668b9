"""Prometheus metrics of the picker, with the upstream endpoint picker's names, labels and buckets.

Every family of :mod:`epp.server.metric_catalog` that the picker feeds is registered under the names
``--metrics-naming`` selects (``both`` by default, as llm-d-router: ``llm_d_epp_*`` plus the deprecated
``inference_*`` twins). A :class:`Twin` holds a family's collectors (zero, one or two) and binds a label
set to one recording object, so a recording costs the same call whichever scheme is chosen (two
updates with ``both``).

Per-request metrics are recorded by :class:`RequestMetrics` through label children bound once per
(model, target model, fairness id, priority) and cached, so a request costs a few dict lookups and
``inc``/``observe`` calls. Label values from the client are bounded as upstream: model and target
model names share a cap of 1000 distinct values, fairness ids another 1000; later values are reported
as ``other``. The child cache holds at most :data:`CHILD_CACHE_BUDGET` entries (beyond that a request
binds its children again, which is correct, only slower).

Scheduler metrics are fed by :class:`SchedulerMetrics` (the scheduler's observer seam), which also
receives the families plugins own (:class:`scheduler.observer.PluginMetrics`): the disaggregation
decision counters per decision, and the in-flight load gauges, read from the
``inflight-load-producer`` instances at scrape time by :class:`InflightCollector`, and the
``predicted-latency-producer``'s latency families (:mod:`epp.server.latency_metrics`, through
:class:`scheduler.observer.LatencyMetrics`). These families are
registered whatever the configuration (upstream registers them with the plugin) and have samples
once a plugin reports. Pool gauges,
the prefix index size and the saturation gauge are computed at scrape time by
:class:`epp.server.pool_metrics.PoolCollector`, never per request.

Error codes (``error_code``) are upstream's: the picker's own HTTP errors map by status
(:func:`error_code`: 400 ``BadRequest``, 404 ``NotFound``, 429 ``ResourceExhausted``, 500 ``Internal``,
503 ``ServiceUnavailable``, ...); a model-server answer other than 2xx is ``ModelServerError``; a stream
that breaks off (reset, timeout, shutdown) is ``Unknown``; a client cancel is not an error (upstream
returns without recording one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from epp.server.latency_metrics import PredictedLatencyMetrics
from epp.server.metric_catalog import Family, Naming, Scheme, by_key
from epp.server.metric_twin import Recorder, Twin
from epp.server.program_metrics import ProgramFairnessCollector
from epp.server.stream_metrics import StreamMetrics
from scheduler.observer import InflightLoadSource, LatencyReport, ProgramFairnessSource
from scheduler.types import Completion, Outcome, SchedulingResult, Usage

__all__ = [
    "CHILD_CACHE_BUDGET",
    "INFLIGHT_SERIES_BUDGET",
    "LABEL_CAP",
    "DataLayerMetrics",
    "InflightCollector",
    "RequestMetrics",
    "SchedulerMetrics",
    "StreamMetrics",
    "Twin",
    "error_code",
    "register_info",
]

LABEL_CAP = 1000  # distinct model (and target model) names, and fairness ids, as upstream
CHILD_CACHE_BUDGET = 4096  # bound label-children bundles kept for reuse
INFLIGHT_SERIES_BUDGET = 4096  # in-flight gauge series remembered at 0 after their last request
OVERFLOW = "other"

_OK, _CLIENT_CANCEL = Outcome.OK, Outcome.CLIENT_CANCEL  # globals: cheaper than Enum members

# HTTP status -> upstream error code (pkg/common/error/error.go: the inverse of BuildErrResponse).
_CODES = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
          412: "PreconditionFailed", 413: "BadRequest", 429: "ResourceExhausted", 500: "Internal",
          503: "ServiceUnavailable"}  # fmt: skip


def error_code(status: int) -> str:
    """Upstream's ``error_code`` for an error the picker answered with HTTP ``status``."""
    return _CODES.get(status, "Unknown")


class _Bounded:
    """Label values from clients, capped at ``cap`` distinct values (then ``other``)."""

    __slots__ = ("cap", "seen")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if not value or value in self.seen:
            return value
        if len(self.seen) >= self.cap:
            return OVERFLOW
        self.seen.add(value)
        return value


class _Children:
    """Label children of one (model, target model, fairness id, priority), reused by every request."""

    __slots__ = ("_itl", "_m", "_tpot", "_ttft", "_ttft_stream", "cached", "duration", "errors", "input",
                 "ntpot", "output", "req_size", "resp_size", "running", "total", "values")  # fmt: skip

    def __init__(self, m: RequestMetrics, values: dict[str, str]) -> None:
        self.values = values
        self.total = m.total.bind(values)
        self.duration = m.duration.bind(values)
        self.req_size = m.request_sizes.bind(values)
        self.resp_size = m.response_sizes.bind(values)
        self.input = m.input_tokens.bind(values)
        self.output = m.output_tokens.bind(values)
        self.cached = m.cached_tokens.bind(values)
        self.ntpot = m.ntpot.bind(values)
        self.running = m.running.bind(values)
        self._m = m
        self._ttft: Recorder | None = None
        self._ttft_stream: Recorder | None = None
        self._tpot: Recorder | None = None
        self._itl: Recorder | None = None
        self.errors: dict[str, Recorder] = {}

    # The latency families of responses are bound on first use, so that a label set never seen
    # (e.g. streaming="false" on an all-streaming workload) does not appear as an empty series.

    def ttft(self, streaming: bool) -> Recorder:
        if streaming:
            if self._ttft_stream is None:
                self._ttft_stream = self._m.ttft.bind({**self.values, "streaming": "true"})
            return self._ttft_stream
        if self._ttft is None:
            self._ttft = self._m.ttft.bind({**self.values, "streaming": "false"})
        return self._ttft

    @property
    def tpot(self) -> Recorder:
        if self._tpot is None:
            self._tpot = self._m.tpot.bind(self.values)
        return self._tpot

    @property
    def itl(self) -> Recorder:
        if self._itl is None:
            self._itl = self._m.itl.bind(self.values)
        return self._itl


class RequestMetrics:
    """Per-request families (``llm_d_epp_request_*`` / ``inference_objective_*``), processing times and
    scheduling attempts; one instance per registry."""

    def __init__(
        self, registry: CollectorRegistry, naming: Naming = Naming.BOTH, namespace: str = ""
    ) -> None:
        """``namespace``: the pool's namespace, the ``namespace`` label of scheduling attempts."""

        def twin(key: str) -> Twin:
            return Twin(by_key(key), naming, registry)

        self.total = twin("request_total")
        self.errors = twin("request_error_total")
        self.duration = twin("request_duration_seconds")
        self.request_sizes = twin("request_size")
        self.response_sizes = twin("response_size")
        self.input_tokens = twin("input_tokens")
        self.output_tokens = twin("output_tokens")
        self.cached_tokens = twin("cached_tokens")
        self.running = twin("running")
        self.ntpot = twin("ntpot")
        self.ttft = twin("ttft")
        self.tpot = twin("tpot")
        self.itl = twin("itl")
        self.attempts = twin("scheduler_attempts")
        self.request_processing = twin("request_processing").bind({})
        self.response_processing = twin("response_processing").bind({})
        self._namespace = namespace
        self._models = _Bounded(LABEL_CAP)
        self._fairness = _Bounded(LABEL_CAP)
        self._children: dict[tuple[str, str, str, int], _Children] = {}
        self._attempts: dict[tuple[str, str | None, str], Recorder] = {}

    def bound(self, model: str, target: str, fairness: str, priority: int) -> _Children:
        """The children of one label set (bound on first use)."""
        key = (model, target, fairness, priority)
        children = self._children.get(key)
        if children is None:
            values = {
                "model_name": self._models(model),
                "target_model_name": self._models(target),
                "fairness_id": self._fairness(fairness),
                "priority": str(priority),
            }
            children = _Children(self, values)
            if len(self._children) < CHILD_CACHE_BUDGET:
                self._children[key] = children
        return children

    def received(self, c: _Children, body_size: int) -> None:
        """A request was parsed and is about to be scheduled."""
        c.total.inc()
        c.req_size.observe(body_size)

    def attempt(self, target: str, result: SchedulingResult | None) -> None:
        """One scheduling call: ``result`` None when it failed; labels the primary endpoint."""
        if result is None:
            key: tuple[str, str | None, str] = (target, None, "")
        elif result.endpoints:
            primary = result.endpoints[0]
            key = (target, primary.address, primary.name)
        else:
            key = (target, "", "")
        child = self._attempts.get(key)
        if child is None:
            child = self.attempts.bind(self._attempt_labels(target, result))
            if len(self._attempts) < CHILD_CACHE_BUDGET:
                self._attempts[key] = child
        child.inc()

    def _attempt_labels(self, target: str, result: SchedulingResult | None) -> dict[str, str]:
        status = "failure" if result is None else "success"
        values = {"status": status, "target_model_name": self._models(target), "pod_name": "",
                  "endpoint_name": "", "namespace": "", "port": ""}  # fmt: skip
        if result is not None and result.endpoints:
            primary = result.endpoints[0]
            values["pod_name"] = values["endpoint_name"] = primary.name
            values["namespace"] = self._namespace if primary.name else ""
            values["port"] = primary.address.rpartition(":")[2]
        return values

    def dispatched(self, c: _Children) -> None:
        c.running.inc()

    def failed(self, c: _Children, code: str) -> None:
        child = c.errors.get(code)
        if child is None:
            values = {**c.values, "error_code": code}
            child = c.errors[code] = self.errors.bind(values)
        child.inc()

    def completed(
        self,
        c: _Children,
        completion: Completion,
        seconds: float,
        response_bytes: int | None,
        ttft: float = 0.0,
        streaming: bool = False,
    ) -> None:
        """A dispatched request ended (any outcome); ``seconds`` since it was received.

        ``response_bytes`` None: the stream did not see the response body (its size and usage are
        recorded by :meth:`observed` when an observability stream reports them). ``ttft`` (0 = unknown):
        seconds from receipt to the first response body byte; ``streaming``: the response was SSE.
        """
        c.running.dec()
        outcome = completion.outcome
        if outcome is not _OK:
            if completion.status_code:
                self.failed(c, "ModelServerError")
            elif outcome is not _CLIENT_CANCEL:
                self.failed(c, "Unknown")
            return
        c.duration.observe(seconds)
        if ttft > 0.0:
            c.ttft(streaming).observe(ttft)
        if response_bytes is not None:
            self._usage(c, completion.usage, seconds, response_bytes)
            tokens = completion.usage.completion_tokens
            if streaming and ttft > 0.0 and tokens > 1 and seconds > ttft:
                c.tpot.observe((seconds - ttft) / (tokens - 1))

    def observed(self, c: _Children, usage: Usage, seconds: float, response_bytes: int) -> None:
        """An observability stream saw a successful response end, ``seconds`` after the request arrived."""
        self._usage(c, usage, seconds, response_bytes)

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
    """Scheduler and plugin families; implements the scheduler's observer protocol and
    :class:`scheduler.observer.PluginMetrics` (decision counters, the in-flight gauges' collector).

    Also holds the prefix-cache hit histograms (fed per routed request by
    :func:`epp.server.prefix_stats.prefix_hit_recorder`) and ``plugin_errors_total`` (ours, not
    upstream's: plugin calls that raised).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        on_plugin_error: Callable[..., None] | None = None,
        naming: Naming = Naming.BOTH,
        namespace: str = "",
    ) -> None:
        """``namespace``: the pool's namespace, the ``namespace`` label of the in-flight gauges."""
        self.naming = naming
        self._registry = registry
        self.e2e = Twin(by_key("scheduler_e2e"), naming, registry).bind({})
        self.plugin = Twin(by_key("plugin_duration"), naming, registry)
        self.plugin_errors = Twin(_PLUGIN_ERRORS, naming, registry)
        self.hit_ratio = Twin(by_key("prefix_hit_ratio"), naming, registry)
        self.hit_bytes = Twin(by_key("prefix_hit_bytes"), naming, registry)
        # Flow control: recorded by epp.flowcontrol.metrics.FlowMetrics from these twins (no samples
        # while flow control is off). In-flight eviction (revocations) is not implemented: exported
        # with upstream's names and labels, never sampled.
        self.flow_twins = {key: Twin(by_key(key), naming, registry) for key in (
            "fc_queue_duration", "fc_dispatch_cycle", "fc_enqueue_duration", "fc_requests")}  # fmt: skip
        for key in ("fc_revocations_issued", "fc_revocations", "fc_revocation_confirmation"):
            Twin(by_key(key), naming, registry)
        self._plugins: dict[tuple[str, str, str], Recorder] = {}
        self._prefix: dict[tuple[str, str], tuple[Recorder, Recorder]] = {}
        self._on_plugin_error = on_plugin_error
        self.pd = Twin(by_key("pd_decision"), naming, registry)
        self.disagg = Twin(by_key("disagg_decision"), naming, registry)
        self._decisions: dict[tuple[str, str, str, str, str], Recorder] = {}
        self._models = _Bounded(LABEL_CAP)
        self.inflight = InflightCollector(naming, namespace)
        registry.register(self.inflight)
        self.latency = PredictedLatencyMetrics(registry, naming, self._models, CHILD_CACHE_BUDGET)
        self.programs = ProgramFairnessCollector(naming)
        registry.register(self.programs)

    # -- predicted-latency-producer (scheduler.observer.LatencyMetrics)

    def latency_observed(self, plugin_type: str, plugin_name: str, report: LatencyReport) -> None:
        self.latency.observed(plugin_type, plugin_name, report)

    def latency_predicted(
        self, plugin_type: str, plugin_name: str, model_name: str, target_model_name: str, seconds: float
    ) -> None:
        self.latency.predicted(plugin_type, plugin_name, model_name, target_model_name, seconds)

    # -- plugin-owned families (scheduler.observer.PluginMetrics)

    def pd_decision(self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str) -> None:
        self._decision(self.pd, plugin_type, plugin_name, model_name, decision_type)

    def disagg_decision(
        self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str
    ) -> None:
        self._decision(self.disagg, plugin_type, plugin_name, model_name, decision_type)

    def watch_inflight_load(self, source: InflightLoadSource) -> None:
        self.inflight.watch(source)

    def watch_program_fairness(self, source: ProgramFairnessSource) -> None:
        """:class:`scheduler.observer.ProgramFairnessMetrics`: export a ``program-aware-fairness``."""
        self.programs.watch(source)

    def _decision(
        self, twin: Twin, plugin_type: str, plugin_name: str, model_name: str, decision_type: str
    ) -> None:
        key = (twin.family.key, plugin_type, plugin_name, model_name, decision_type)
        child = self._decisions.get(key)
        if child is None:
            model = self._models(model_name) or "unknown"
            values = {"plugin_type": plugin_type, "plugin_name": plugin_name, "model_name": model,
                      "decision_type": decision_type}  # fmt: skip
            child = twin.bind(values)
            if len(self._decisions) < CHILD_CACHE_BUDGET:
                self._decisions[key] = child
        child.inc()

    def observe_plugin(
        self, extension_point: str, plugin_type: str, plugin_name: str, seconds: float
    ) -> None:
        key = (extension_point, plugin_type, plugin_name)
        child = self._plugins.get(key)
        if child is None:
            child = self._plugin_child(key)
        child.observe(seconds)

    def plugin_timer(
        self, extension_point: str, plugin_type: str, plugin_name: str
    ) -> Callable[[float], None]:
        """:class:`scheduler.observer.PluginTimers`: the series' own ``observe`` (bound now)."""
        key = (extension_point, plugin_type, plugin_name)
        child = self._plugins.get(key)
        if child is None:
            child = self._plugin_child(key)
        return child.observe

    def _plugin_child(self, key: tuple[str, str, str]) -> Recorder:
        extension_point, plugin_type, plugin_name = key
        child = self._plugins[key] = self.plugin.bind(
            {"extension_point": extension_point, "plugin_type": plugin_type, "plugin_name": plugin_name}
        )
        return child

    def observe_cycle(self, seconds: float, status: str) -> None:
        self.e2e.observe(seconds)

    def observe_prefix(
        self, plugin_name: str, plugin_type: str, hit_bytes: float, ratio: float | None
    ) -> None:
        """One request's prefix-cache hit as one prefix plugin saw it (``ratio`` None: no block)."""
        key = (plugin_name, plugin_type)
        pair = self._prefix.get(key)
        if pair is None:
            values = {"plugin_name": plugin_name, "plugin_type": plugin_type}
            pair = self._prefix[key] = (self.hit_bytes.bind(values), self.hit_ratio.bind(values))
        pair[0].observe(hit_bytes)
        if ratio is not None:
            pair[1].observe(ratio)

    def plugin_error(
        self, extension_point: str, plugin_type: str, plugin_name: str, error: BaseException
    ) -> None:
        self.plugin_errors.bind(
            {"extension_point": extension_point, "plugin_type": plugin_type, "plugin_name": plugin_name}
        ).inc()
        if self._on_plugin_error is not None:
            self._on_plugin_error(extension_point, plugin_type, plugin_name, error)


class InflightCollector(Collector):
    """``llm_d_epp_inflight_requests`` / ``llm_d_epp_inflight_tokens{endpoint_name, namespace,
    producer_name, fairness_id, priority}``, read from the watched sources at every scrape.

    llm-d names only (no deprecated twin). As upstream's gauges, a series stays at 0 once its last
    request ends; at most :data:`INFLIGHT_SERIES_BUDGET` series are remembered that way (beyond it the
    ones idle longest are dropped; series with requests in flight are always exported).
    """

    def __init__(self, naming: Naming = Naming.BOTH, namespace: str = "") -> None:
        self._namespace = namespace
        self._sources: dict[str, InflightLoadSource] = {}  # one per producer of the configuration
        self._seen: dict[tuple[str, str, str, str], None] = {}
        self._names = [
            (name, by_key(key).help, by_key(key).labels(Scheme.LLM_D))
            for key in ("inflight_requests", "inflight_tokens")
            if naming.exports(Scheme.LLM_D) and (name := by_key(key).name(Scheme.LLM_D)) is not None
        ]

    def watch(self, source: InflightLoadSource) -> None:
        """Export ``source`` (replacing an earlier source of the same producer name)."""
        self._sources[source.name] = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if not self._names:
            return
        live: dict[tuple[str, str, str, str], tuple[int, int]] = {}
        for producer, source in self._sources.items():
            for s in source.inflight_samples():
                live[(s.endpoint_name, producer, s.fairness_id, str(s.priority))] = (s.requests, s.tokens)
        seen = self._seen
        for key in live:  # most recently live last
            seen.pop(key, None)
            seen[key] = None
        excess = len(seen) - INFLIGHT_SERIES_BUDGET
        if excess > 0:
            for key in [k for k in seen if k not in live][:excess]:
                del seen[key]
        families = [GaugeMetricFamily(name, doc, labels=labels) for name, doc, labels in self._names]
        for key in seen:
            endpoint, producer, fairness_id, priority = key
            values = [endpoint, self._namespace, producer, fairness_id, priority]
            counts = live.get(key, (0, 0))
            for family, value in zip(families, counts, strict=True):
                family.add_metric(values, float(value))
        yield from families


_PLUGIN_ERRORS = Family(
    "plugin_errors", "counter", "Plugin calls that raised (pyepp's own family, not upstream's).",
    "llm_d_epp_plugin_errors", ("extension_point", "plugin_type", "plugin_name"),
    "inference_extension_plugin_errors", ("extension_point", "plugin_type", "plugin_name"),
)  # fmt: skip


class DataLayerMetrics:
    """``datalayer_poll_errors_total{source_type}`` / ``datalayer_extract_errors_total{source_type,
    extractor_type}``: the data layer's error sink (:meth:`datalayer.DataLayer.on_poll_error`)."""

    def __init__(self, registry: CollectorRegistry, naming: Naming = Naming.BOTH) -> None:
        self.poll = Twin(by_key("datalayer_poll_errors"), naming, registry)
        self.extract = Twin(by_key("datalayer_extract_errors"), naming, registry)

    def __call__(self, source_type: str, extractor_type: str | None) -> None:
        if extractor_type is None:
            self.poll.bind({"source_type": source_type}).inc()
        else:
            self.extract.bind({"source_type": source_type, "extractor_type": extractor_type}).inc()


def register_info(
    registry: CollectorRegistry, commit: str, build_ref: str, naming: Naming = Naming.BOTH
) -> None:
    """``llm_d_epp_info`` / ``inference_extension_info{commit,build_ref} 1``."""
    Twin(by_key("info"), naming, registry).bind({"commit": commit, "build_ref": build_ref}).set(1)
