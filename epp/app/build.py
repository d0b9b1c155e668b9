"""The composition root: :func:`build_app` validates everything and assembles the picker (no port is
opened yet): the EndpointPickerConfig with the sections other parts own, the admission stores, the
server settings, the data layer with its discovery source, the scheduler, metrics, flow control and the
ext_proc session configuration. Raises :class:`~epp.app.errors.StartupError` naming the file or flag
and what was expected.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import structlog
from prometheus_client import CollectorRegistry, disable_created_metrics

from datalayer import (
    DataLayer,
    DataLayerOptions,
    EngineConfigError,
    apply_metric_overrides,
    default_http_client,
)
from datalayer.engines import BUILTIN_ENGINES
from datalayer.kv_events import KVEventFeed, kv_event_sources
from epp.admission import Admitter
from epp.admission.rewrites import ModelRewriter
from epp.app.endpoints import DiscoveryError, build_config_discovery, build_discovery
from epp.app.errors import StartupError
from epp.app.picker import PickerApp
from epp.app.settings import config_view, server_settings
from epp.app.stores import objective_store, rewrite_store
from epp.config.feature_gates import (
    DATA_LAYER,
    FLOW_CONTROL,
    HA_POPULATE_NON_LEADER_DATASTORE,
    LEGACY_METRICS,
    FeatureGates,
    flow_control_from_env,
)
from epp.config.options import Options
from epp.config.sections import load_picker_config, with_flow_control
from epp.config.stability import experimental_plugin_error
from epp.flowcontrol.controller import FlowController
from epp.flowcontrol.metrics import FlowMetrics, queue_gauges
from epp.protocol import SessionConfig
from epp.protocol.config import ResponseMetadataFn
from epp.server.kv_cache_metrics import KVCacheCollector, LocalTokenizerCollector
from epp.server.latency_sidecar import SidecarConfigError, latency_sidecar
from epp.server.latency_sidecar_metrics import LatencySidecarCollector
from epp.server.metric_catalog import Naming
from epp.server.metrics import (
    DataLayerMetrics,
    RequestMetrics,
    SchedulerMetrics,
    StreamMetrics,
    register_info,
)
from epp.server.pool_metrics import PoolCollector
from epp.server.prefix_stats import index_sizes_reader, prefix_hit_recorder
from epp.server.rewrite_metrics import RewriteMetrics
from epp.server.server import EppServer
from epp.sync import ReplicaSyncCollector, ReplicaSyncService, read_key
from scheduler.config.document import API_VERSION, LEGACY_API_VERSION
from scheduler.errors import ConfigError
from scheduler.interfaces import RequestAdmitter, ResponseMetadataProvider
from scheduler.plugins.precise.producer import PrecisePrefixCacheProducer
from scheduler.plugins.request_attributes import AgentIdentity
from scheduler.replica_sync import ReplicaSynced
from scheduler.roles import has_role
from scheduler.types import EndpointView, LLMRequest, SchedulingResult, Usage

__all__ = ["build_app", "response_metadata_of"]

_log = structlog.get_logger("epp")


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
    objectives, priorities = objective_store(options)
    rewrites = rewrite_store(options)
    settings = server_settings(options)
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
    if tokenizing := [
        p for p in plugins if isinstance(p, PrecisePrefixCacheProducer) and p.local is not None
    ]:
        registry.register(LocalTokenizerCollector(tokenizing))
    pool = options.pool_name or "default"
    flow = None
    if loaded.feature_gates.enabled(FLOW_CONTROL) and loaded.flow_control is not None:
        recorder = FlowMetrics(scheduler_metrics.flow_twins, pool)
        flow = FlowController(loaded.flow_control, detector, layer.snapshot, layer.now, recorder,
                              objective_priorities=objectives.priorities)  # fmt: skip
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
        first_chunk_only=scheduler.first_chunk_only,
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
    try:
        sidecar = latency_sidecar(plugins, layer.snapshot, os.environ)
    except SidecarConfigError as exc:
        raise StartupError(f"latency predictor sidecar: {exc}") from None
    if sidecar is not None:
        registry.register(LatencySidecarCollector(sidecar))
    server = EppServer(
        settings,
        source=layer,
        admitter=Admitter(
            None if flow is not None else detector,  # flow control queues instead of shedding
            layer.now,
            [p for p in plugins if isinstance(p, RequestAdmitter) and has_role(p, RequestAdmitter)],
        ),
        scheduler=scheduler,
        session_config=session_config,
        registry=registry,
        request_metrics=request_metrics,
        config_view=config_view(options, config),
        on_result=prefix_hit_recorder(plugins, scheduler_metrics.observe_prefix),
        stream_metrics=StreamMetrics(registry, naming) if options.enable_grpc_stream_metrics else None,
        flow=flow,
        latency_sidecar=sidecar,
    )
    _log_gates(loaded.feature_gates)
    replica_sync = _replica_sync(options, plugins, layer)
    if replica_sync is not None:
        registry.register(ReplicaSyncCollector(replica_sync))
    return PickerApp(
        options, config, layer, http, server, built.api_client, objectives, loaded.feature_gates, rewrites,
        replica_sync,
    )  # fmt: skip


def _replica_sync(options: Options, plugins: Sequence[object], layer: DataLayer) -> ReplicaSyncService | None:
    """The replica-sync endpoint (``--replica-sync-port``), or None when it is off."""
    if not options.replica_sync_port or options.replica_sync_key_file is None:
        return None
    try:
        key = read_key(options.replica_sync_key_file)
    except ValueError as exc:
        raise StartupError(f"--replica-sync-key-file: {exc}") from None
    host = options.host
    if ":" in host:  # the sync socket is IPv4 (peers too): all interfaces stay all interfaces
        if host.strip("[]") != "::":
            raise StartupError(
                f"--replica-sync-port: replica sync is IPv4 only; --host {host} is an IPv6 address"
            )
        host = "0.0.0.0"
    synced = [p for p in plugins if isinstance(p, ReplicaSynced)]
    if not synced:
        _log.warning(
            "--replica-sync-port: the configuration has no plugin whose state replicas share "
            "(prefix-affinity-scorer, active-request-scorer); only the transport runs"
        )
    return ReplicaSyncService(
        host=host,
        port=options.replica_sync_port,
        peers=options.replica_peers,
        key=key,
        plugins=synced,
        in_pool=lambda address: layer.get(address) is not None,
        interval=options.replica_sync_interval,
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
