"""Wiring: from :class:`~epp.options.Options` to a running picker, and its lifecycle.

:func:`build_app` validates everything before a port is opened (EndpointPickerConfig with the
sections owned by other parts, objectives file, certificates, discovery settings) and raises
:class:`StartupError` naming the file / flag and what was expected. :class:`PickerApp` then runs:

1. the servers (:class:`~epp.server.server.EppServer`): health says live, not ready;
2. the data layer (discovery + scrapers); when its first discovery listing is applied and, with
   ``--ready-requires-endpoint`` (the default in the standalone modes), an endpoint has answered a
   scrape, health turns SERVING (with ``--ha-enable-leader-election``, only while this replica leads);
   until then a warning names every endpoint that does not answer (:mod:`epp.readiness`);
3. on SIGTERM/SIGINT: the background tasks stop first (leader election gives its lease up), health
   NOT_SERVING, no new streams, in-flight streams get ``--drain-timeout`` (default 30s), the rest are
   cancelled (outcome SHUTDOWN); then the data layer stops.

Feature gates (:mod:`epp.feature_gates`): ``haPopulateNonLeaderDatastore=false`` with leader election
starts the data layer only while this replica leads (stopped when it stops leading);
``enableLegacyMetrics`` and ``dataLayer`` are logged at start.

The scheduler's ``endpoints_removed`` hook is subscribed to the data layer's removals; every request
takes one snapshot from the data layer (``DataLayer.snapshot()``, an immutable tuple).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, disable_created_metrics

from datalayer import (
    DataLayer,
    DataLayerOptions,
    EngineConfigError,
    HttpClient,
    apply_metric_overrides,
    default_http_client,
)
from datalayer.engines import BUILTIN_ENGINES
from datalayer.kv_events import KVEventFeed, kv_event_sources
from epp.admission import (
    Admitter,
    InMemoryObjectiveStore,
    ObjectivePriorities,
    ObjectivesFileError,
    load_objectives_file,
)
from epp.admission.rewrites import ModelRewriter, RewriteStore
from epp.admission.rewrites_file import RewritesFileError, load_rewrites_file
from epp.config_sections import load_picker_config, with_flow_control
from epp.discovery import DiscoveryError, build_config_discovery, build_discovery
from epp.feature_gates import (
    DATA_LAYER,
    FLOW_CONTROL,
    HA_POPULATE_NON_LEADER_DATASTORE,
    LEGACY_METRICS,
    FeatureGates,
    flow_control_from_env,
)
from epp.flowcontrol.controller import FlowController
from epp.flowcontrol.metrics import FlowMetrics, queue_gauges
from epp.options import Options
from epp.protocol import SessionConfig
from epp.protocol.config import ResponseMetadataFn
from epp.readiness import answered, wait_for_an_answer
from epp.server.http import MetricsTls
from epp.server.kv_cache_metrics import KVCacheCollector
from epp.server.metric_catalog import Naming
from epp.server.metrics import (
    DataLayerMetrics,
    RequestMetrics,
    SchedulerMetrics,
    StreamMetrics,
    register_info,
)
from epp.server.pool_metrics import PoolCollector
from epp.server.prefix_stats import index_sizes_reader, prefix_hit_observer
from epp.server.rewrite_metrics import RewriteMetrics
from epp.server.server import EppServer, ServerSettings
from epp.server.tls import (
    TlsError,
    apply_tls_overrides,
    load_certificate,
    read_client_ca,
    server_credentials,
)
from epp.stability import experimental_plugin_error
from scheduler.config.document import API_VERSION, LEGACY_API_VERSION
from scheduler.config.resolved import ResolvedConfig
from scheduler.errors import ConfigError
from scheduler.interfaces import RequestAdmitter, ResponseMetadataProvider
from scheduler.plugins.request_attributes import AgentIdentity
from scheduler.types import EndpointView, LLMRequest, SchedulingResult, Usage

__all__ = ["PickerApp", "StartupError", "build_app", "run", "serve"]

_log = structlog.get_logger("epp")


class StartupError(Exception):
    """The picker cannot start; the message names the flag or file and what is wrong."""


def _read_token(options: Options) -> str | None:
    if not options.metrics_endpoint_auth or options.metrics_bearer_token_file is None:
        return None
    path = options.metrics_bearer_token_file
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise StartupError(f"--metrics-bearer-token-file {path}: cannot read ({exc.strerror})") from None
    if not token:
        raise StartupError(f"--metrics-bearer-token-file {path}: the file is empty")
    return token


def _objectives(options: Options) -> tuple[InMemoryObjectiveStore, ObjectivePriorities]:
    """The objective store and the priority lookup over it.

    Standalone modes read ``--objectives-file``; in InferencePool mode the store is fed by a watch of the
    cluster's InferenceObjective objects (started with the app), so a file there is contradictory.
    """
    store = InMemoryObjectiveStore()
    if options.objectives_file is not None and options.discovery_mode == "pool":
        raise StartupError(
            "--objectives-file cannot be combined with --pool-name: in InferencePool mode the picker watches "
            "the cluster's InferenceObjective objects"
        )
    if options.objectives_file is not None:
        try:
            objectives = load_objectives_file(options.objectives_file, pool_name=options.pool_name)
        except ObjectivesFileError as exc:
            raise StartupError(f"--objectives-file: {exc}") from None
        for objective in objectives:
            store.upsert(objective)
    return store, ObjectivePriorities(store)


def _rewrites(options: Options) -> RewriteStore:
    """The InferenceModelRewrite store: ``--model-rewrites-file`` in standalone modes, fed by a watch in
    InferencePool mode (a file there is contradictory, as for objectives)."""
    if options.model_rewrites_file is None:
        return RewriteStore()
    if options.discovery_mode == "pool":
        raise StartupError(
            "--model-rewrites-file cannot be combined with --pool-name: in InferencePool mode the picker "
            "watches the cluster's InferenceModelRewrite objects"
        )
    try:
        return RewriteStore(load_rewrites_file(options.model_rewrites_file, pool_name=options.pool_name))
    except RewritesFileError as exc:
        raise StartupError(f"--model-rewrites-file: {exc}") from None


def _config_view(options: Options, config: ResolvedConfig) -> Callable[[], Mapping[str, Any]]:
    flags = {k: getattr(options, k) for k in options.__slots__}
    flags["config_text"] = "(set)" if options.config_text else None
    view = {"flags": flags, "config": config.to_dict(), "source": config.source}
    return lambda: view


def _server_settings(options: Options) -> ServerSettings:
    """Ports, TLS material (generated or read now), token, diagnostics. Raises StartupError."""
    credentials, certificate, reload_from, client_ca = None, None, None, None
    if options.secure_serving:
        hosts = [socket.gethostname()]
        if options.grpc_client_ca_file is not None:
            try:
                client_ca = read_client_ca(options.grpc_client_ca_file)
            except TlsError as exc:
                raise StartupError(f"--grpc-client-ca-file: {exc}") from None
        try:
            if options.grpc_engine == "h2":
                certificate, reload_from = load_certificate(
                    cert_path=options.cert_path, reload=options.enable_cert_reload, hosts=hosts
                )
            else:
                credentials, certificate = server_credentials(
                    cert_path=options.cert_path,
                    reload=options.enable_cert_reload,
                    hosts=hosts,
                    client_ca=client_ca,
                )
        except TlsError as exc:
            raise StartupError(f"--cert-path: {exc}") from None
        try:  # check now that this OpenSSL can offer what --tls-min-version / --tls-cipher-suites ask
            apply_tls_overrides(
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), options.tls_min_version, options.tls_cipher_suites
            )
        except TlsError as exc:
            raise StartupError(f"--tls-cipher-suites: {exc}") from None
    metrics_tls = None
    if options.metrics_cert_dir is not None:
        try:
            metrics_tls = MetricsTls(options.metrics_cert_dir, options.metrics_client_ca_file)
        except TlsError as exc:
            raise StartupError(f"--metrics-cert-dir: {exc}") from None
    return ServerSettings(
        host=options.host,
        grpc_port=options.grpc_port,
        grpc_health_port=options.grpc_health_port,
        metrics_port=options.metrics_port,
        credentials=credentials,
        certificate=certificate,
        reload_from=reload_from,
        client_ca=client_ca,
        engine=options.grpc_engine,
        max_body_bytes=options.max_body_bytes,
        health_on_ext_proc_port=options.health_checking,
        leader_election=options.ha_enable_leader_election,
        shutdown_grace=options.drain_timeout,
        max_recv_bytes=options.grpc_max_recv_msg_size,
        max_send_bytes=options.grpc_max_send_msg_size,
        h2_limits=options.h2_limits,
        tls_min_version=options.tls_min_version,
        tls_cipher_suites=options.tls_cipher_suites,
        metrics_tls=metrics_tls,
        verbosity=options.verbosity,
        tracing=options.tracing,
        metrics_token=_read_token(options),
    )


class _LeaderOnlyDataLayer:
    """Leadership target running the data layer only while leading (haPopulateNonLeaderDatastore=false)."""

    def __init__(self, server: EppServer, layer: DataLayer) -> None:
        self._server = server
        self._layer = layer

    async def set_leader(self, leader: bool) -> None:
        if leader:
            await self._layer.start()
            await self._server.set_leader(True)
        else:
            await self._server.set_leader(False)
            await self._layer.stop()


class PickerApp:
    """The assembled picker: servers, data layer, optional leader elector."""

    def __init__(
        self,
        options: Options,
        config: ResolvedConfig,
        layer: DataLayer,
        http: HttpClient,
        server: EppServer,
        kube_client: Any = None,
        objectives: InMemoryObjectiveStore | None = None,
        gates: FeatureGates | None = None,
        rewrites: RewriteStore | None = None,
    ) -> None:
        self.options = options
        self.rewrites = rewrites
        self.gates = gates or FeatureGates()
        self.config = config
        self.layer = layer
        self.server = server
        self._http = http
        self._kube = kube_client
        self.objectives = objectives
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def leader_only_datalayer(self) -> bool:
        """True when the data layer runs only while leading (leader election + the gate off)."""
        populate = self.gates.enabled(HA_POPULATE_NON_LEADER_DATASTORE)
        return self.options.ha_enable_leader_election and not populate

    async def start(self) -> None:
        await self.server.start()
        if not self.leader_only_datalayer:
            await self.layer.start()
        self._tasks.append(asyncio.create_task(self._ready_when_synced(), name="epp-ready"))
        if self.options.ha_enable_leader_election:
            self._tasks.append(asyncio.create_task(self._lead(), name="epp-leader-election"))
        o = self.options
        if self._kube is not None and self.objectives is not None and o.pool_name:
            from epp.objectives_watch import ObjectiveWatch

            watch = ObjectiveWatch(self._kube, o.pool_namespace, o.pool_name, self.objectives)
            self._tasks.append(asyncio.create_task(watch.run(), name="epp-objectives-watch"))
        if self._kube is not None and self.rewrites is not None and o.pool_name:
            from epp.rewrites_watch import RewriteWatch

            rewrites = RewriteWatch(self._kube, o.pool_namespace, o.pool_name, self.rewrites, o.pool_group)
            self._tasks.append(asyncio.create_task(rewrites.run(), name="epp-rewrites-watch"))
        _log.info(
            "endpoint picker started",
            grpc_port=self.server.grpc_port,
            grpc_health_port=self.server.grpc_health_port,
            metrics_port=self.server.metrics_port,
            tls=o.secure_serving,
            discovery=o.discovery_mode,
            config=self.config.source,
        )

    async def _ready_when_synced(self) -> None:
        await self.layer.wait_synced()
        snapshot = self.layer.snapshot
        if self.options.ready_requires_endpoint:
            message = "no endpoint has answered a scrape yet: not ready"
            count = await wait_for_an_answer(snapshot, _log, message)
            await self.server.set_synced(True)
            _log.info("endpoints synced: ready", endpoints=len(snapshot()), answered=count)
            return
        await self.server.set_synced(True)
        _log.info("endpoints synced: ready", endpoints=len(snapshot()), answered=answered(snapshot()))
        await wait_for_an_answer(snapshot, _log, "no endpoint has answered a scrape yet", interval=0.5)

    async def _lead(self) -> None:
        from epp.leader import run_leader_election

        target = _LeaderOnlyDataLayer(self.server, self.layer) if self.leader_only_datalayer else self.server
        try:
            await run_leader_election(self.options, target)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no Kubernetes API: stay live, never ready
            _log.error("leader election cannot run: this replica stays not ready", error=str(exc))

    async def stop(self) -> None:
        _log.info("shutting down", drain_timeout_seconds=self.options.drain_timeout)
        for task in self._tasks:  # first: a leader gives its lease up at once, as upstream
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.server.shutdown()
        await self.layer.stop()
        await self._http.aclose()
        if self._kube is not None:
            await self._kube.close()
        _log.info("stopped", completed_requests=self.server.servicer.completions)


def _stale_reader(
    detector: object, now: Callable[[], float]
) -> Callable[[Sequence[EndpointView]], tuple[str, int] | None]:
    """The utilization detector's stale-endpoint count for the stale-endpoints gauge (None without one)."""
    count = getattr(detector, "stale_count", None)
    if count is None:
        return lambda _: None
    name = str(getattr(detector, "name", "utilization-detector"))
    return lambda endpoints: (name, count(endpoints, now()))


async def build_app(options: Options) -> PickerApp:
    """Validate and assemble everything (no port is opened yet). Raises StartupError."""
    disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        loaded = load_picker_config(options.config_file, options.config_text)
    except ConfigError as exc:
        raise StartupError(f"invalid configuration: {exc}") from None
    if flow_control_from_env(os.environ):  # GIE's deprecated switch: the same as the gate
        loaded = with_flow_control(loaded)
    config = loaded.config
    if config.api_version == LEGACY_API_VERSION and (options.config_file or options.config_text):
        _log.info(  # as llm-d-router logs it
            "DEPRECATION: apiVersion inference.networking.x-k8s.io/v1alpha1 is deprecated",
            replacement=API_VERSION,
            convert=f"epp check-config --to {API_VERSION} FILE",
        )
    gate = experimental_plugin_error(
        config.api_version,
        [(p.spec.name, p.spec.type) for p in config.plugins if not p.implicit],
        allowed=options.allow_experimental_plugins,
    )
    if gate is not None:
        raise StartupError(gate)
    objectives, priorities = _objectives(options)
    rewrites = _rewrites(options)
    settings = _server_settings(options)
    try:
        engines = apply_metric_overrides(
            loaded.data_layer.engines or BUILTIN_ENGINES, options.metric_overrides
        )
    except EngineConfigError as exc:
        raise StartupError(f"metric flags: {exc}") from None
    try:
        if loaded.data_layer.discovery is not None or options.discovery_mode == "config":
            built = build_config_discovery(options, loaded.data_layer.discovery)
        else:
            built = await build_discovery(options)
    except DiscoveryError as exc:
        raise StartupError(str(exc)) from None
    http = default_http_client(
        options.model_server_metrics_scheme,
        verify_tls=not options.model_server_metrics_https_insecure_skip_verify,
    )
    try:
        endpoint_sources = kv_event_sources(
            [p.plugin for p in config.plugins],
            loaded.data_layer.endpoint_sources(config.plugin),
            namespace=options.pool_namespace,
        )
    except ConfigError as exc:
        raise StartupError(
            f"invalid configuration: {exc.at(source=str(options.config_file or ''))}"
        ) from None
    try:
        layer = DataLayer(
            built.discovery,
            http=http,
            options=DataLayerOptions(
                refresh_interval=options.refresh_metrics_interval,
                staleness_threshold=options.metrics_staleness_threshold,
                scheme=options.model_server_metrics_scheme,
                metrics_path=options.model_server_metrics_path,
                metrics_port=options.model_server_metrics_port,
                insecure_skip_verify=options.model_server_metrics_https_insecure_skip_verify,
                engines=engines,
            ),
            sources=loaded.data_layer.build_sources(
                engines=engines, metrics_path=options.model_server_metrics_path
            ),
            endpoint_sources=endpoint_sources,
        )
    except ValueError as exc:  # TLS material of a data source (TlsSettingsError), a bad engine mapping
        raise StartupError(f"dataLayer: {exc}") from None
    registry = CollectorRegistry()
    naming = Naming(options.metrics_naming)
    layer.on_poll_error(DataLayerMetrics(registry, naming))
    if feeds := [s for s in layer.endpoint_sources if isinstance(s, KVEventFeed)]:
        registry.register(KVCacheCollector(feeds, naming))
    scheduler_metrics = SchedulerMetrics(registry, naming=naming, namespace=options.pool_namespace)
    scheduler = config.build_scheduler(observer=scheduler_metrics)
    layer.on_endpoints_removed(scheduler.endpoints_removed)
    detector = loaded.saturation_detector
    plugins = [p.plugin for p in config.plugins]
    pool = options.pool_name or "default"
    flow = None
    if loaded.feature_gates.enabled(FLOW_CONTROL) and loaded.flow_control is not None:
        recorder = FlowMetrics(scheduler_metrics.flow_twins, pool)
        flow = FlowController(loaded.flow_control, detector, layer.snapshot, layer.now, recorder)
    elif loaded.flow_control is not None:
        _log.warning(  # as llm-d-router
            "the flowControl config section is set but the flowControl feature gate is disabled; "
            "its settings (other than saturationDetector) are ignored"
        )
    registry.register(
        PoolCollector(
            pool,
            layer.snapshot,
            saturation=lambda eps: detector.saturation(eps, layer.now()) if detector is not None else None,
            index_sizes=index_sizes_reader(plugins),
            stale=_stale_reader(detector, layer.now),
            naming=naming,
            flow_rows=partial(queue_gauges, flow, pool) if flow is not None else dict,
        )
    )
    commit, build_ref = os.environ.get("EPP_COMMIT", "unknown"), os.environ.get("EPP_BUILD_REF", "dev")
    register_info(registry, commit, build_ref, naming)
    request_metrics = RequestMetrics(registry, naming, options.pool_namespace)
    session_config = SessionConfig(
        parser=loaded.parser,
        priority_of=priorities,
        max_body_bytes=options.max_body_bytes,
        response_chunks=scheduler.has_chunk_hooks,
        response_header_map=scheduler.has_response_header_hooks,
        response_headers=(
            scheduler.added_response_headers if scheduler.has_response_header_providers else None
        ),
        owned_request_headers=scheduler.owned_request_headers,
        endpoint_subset_filter=not options.disable_endpoint_subset_filter,
        emit_endpoint_scores=options.emit_endpoint_scores,
        agent_identity=next((p.attribute for p in plugins if isinstance(p, AgentIdentity)), None),
        response_metadata=response_metadata_of(plugins),
        model_rewrite=ModelRewriter(
            rewrites, on_decision=RewriteMetrics(registry, naming), log_decisions=options.verbosity >= 2
        ),
    )
    server = EppServer(
        settings,
        source=layer,
        admitter=Admitter(
            None if flow is not None else detector,  # flow control queues instead of shedding
            layer.now,
            [p for p in plugins if isinstance(p, RequestAdmitter)],
        ),
        scheduler=scheduler,
        session_config=session_config,
        registry=registry,
        request_metrics=request_metrics,
        config_view=_config_view(options, config),
        on_result=prefix_hit_observer(plugins, scheduler_metrics.observe_prefix),
        stream_metrics=StreamMetrics(registry, naming) if options.enable_grpc_stream_metrics else None,
        flow=flow,
    )
    _log_gates(loaded.feature_gates)
    return PickerApp(
        options, config, layer, http, server, built.api_client, objectives, loaded.feature_gates, rewrites
    )


def response_metadata_of(plugins: Sequence[object]) -> ResponseMetadataFn | None:
    """The dynamic-metadata function of the ``ResponseMetadataProvider`` plugins (None: there are none);
    their namespaces are merged in configuration order."""
    providers = [p for p in plugins if isinstance(p, ResponseMetadataProvider)]
    if not providers:
        return None

    def metadata(
        request: LLMRequest, result: SchedulingResult, usage: Usage
    ) -> Mapping[str, Mapping[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for provider in providers:
            for namespace, fields in provider.response_metadata(request, result, usage).items():
                out.setdefault(namespace, {}).update(fields)
        return out

    return metadata


def _log_gates(gates: FeatureGates) -> None:
    if gates.enabled(FLOW_CONTROL):
        _log.info("flow control on: requests wait in priority bands while the pool is saturated")
    if gates.enabled(DATA_LAYER):
        _log.info("the data layer is always on in pyepp: the 'dataLayer' feature gate can be removed")
    if gates.enabled(LEGACY_METRICS):
        _log.info(
            "data layer: legacy metrics polling (enableLegacyMetrics): the dataLayer section is not used; "
            "metrics only, per the --model-server-metrics-* and metric-name flags"
        )
    if not gates.enabled(HA_POPULATE_NON_LEADER_DATASTORE):
        _log.info("haPopulateNonLeaderDatastore=false: the data layer runs only while this replica leads")


async def run(options: Options, stop: asyncio.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or ``stop`` is set). Raises StartupError before serving."""
    stop = stop or asyncio.Event()
    app = await build_app(options)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await app.start()
    except RuntimeError as exc:  # a port cannot be bound
        await app.stop()
        raise StartupError(str(exc)) from None
    try:
        await stop.wait()
    finally:
        await app.stop()
    return 0


def serve(options: Options) -> int:
    """The ``epp`` process: logging, event loop (uvloop when installed), run, exit status."""
    from epp.server.logs import configure_logging

    configure_logging(
        options.verbosity,
        options.log_format,
        time_encoding=options.zap_time_encoding,
        stacktrace_level=options.zap_stacktrace_level,
        development=options.zap_devel,
    )
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(run(options))
    except StartupError as exc:
        print(f"epp: {exc}", file=sys.stderr)  # once, as plain text (no log line repeating it)
        return 1
