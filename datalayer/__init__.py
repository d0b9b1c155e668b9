"""The data layer: discover model-server endpoints, poll their state, hand out immutable snapshots.

Public API (what the epp service uses)::

    from datalayer import DataLayer, DataLayerOptions, StaticDiscovery, default_http_client

    http = default_http_client("http")   # RawHttpClient (https: AiohttpClient); one keep-alive pool
    layer = DataLayer(
        StaticDiscovery.from_addresses(["10.0.0.1:8000", "10.0.0.2:8000"]),
        http=http,
        options=DataLayerOptions(refresh_interval=0.05, staleness_threshold=2.0),
    )
    await layer.start()                 # discovery + pollers + staleness sweeper on the running loop
    layer.synced                        # first discovery listing applied (gate health on it)
    endpoints = layer.snapshot()        # tuple[EndpointRecord, ...]; same object until a change
    pool = layer.aggregates()           # PoolAggregates over fresh endpoints
    unsubscribe = layer.on_endpoints_removed(lambda addrs: ...)   # frozenset of "ip:port"
    await layer.stop(); await http.aclose()

* Discovery sources (:mod:`datalayer.discovery`): :class:`StaticDiscovery` (``--endpoints``),
  :class:`FileDiscovery` (``--endpoints-file``), :class:`KubePoolDiscovery` (``--pool-name``) and
  :class:`KubeSelectorDiscovery` (``--endpoint-selector`` + ``--endpoint-target-ports``); the
  Kubernetes ones take a kubernetes-asyncio ``ApiClient`` (e.g. from ``config.load_incluster_config``).
  Host names in the standalone sources are resolved by wrapping them in
  ``datalayer.discovery.ResolvingDiscovery`` (resolver seam: ``datalayer.discovery.Resolver``).
* Records: :class:`EndpointRecord` (structurally a scheduler ``EndpointView``: ``address``, ``name``,
  ``labels``, ``ready``, ``metrics``, ``attributes``, plus ``engine``, ``health``, ``last_error``) with
  :class:`EndpointMetrics` (a ``MetricsView``; ``updated_at`` on the monotonic clock).
* Configuration: :func:`validate_datalayer_section` (the ``dataLayer`` section; returns a
  :class:`DataLayerConfig` whose ``build_sources()`` gives the ``sources=`` argument and whose
  ``engines`` are the ``engineConfigs``), :func:`plugin_factories` (data-layer plugin types for the
  scheduler's registry), :func:`load_endpoints_file` (startup check of ``--endpoints-file``).
* Engine mappings: :data:`BUILTIN_ENGINES`, :func:`parse_engine_configs` (``engineConfigs``),
  :func:`apply_metric_overrides` (GIE's per-metric flags).
* Data-source plugins: :class:`DataSource`, :class:`MetricsExtractor`; built-ins
  :class:`MetricsDataSource`, :class:`CoreMetricsExtractor`, :class:`ModelsDataSource`,
  :class:`ModelsExtractor`.
* HTTP seam: :class:`HttpClient` (:class:`RawHttpClient`, :class:`AiohttpClient`),
  :func:`default_http_client`; per-source connections
  (:class:`SourceConnection`: scheme, port, TLS with :class:`TlsSettings`) in :mod:`datalayer.connection`.

This package never imports ``epp`` or ``scheduler``.
"""

from datalayer.aggregates import PoolAggregates, pool_aggregates
from datalayer.config import (
    DataLayerConfig,
    DataLayerConfigError,
    plugin_factories,
    validate_datalayer_section,
)
from datalayer.connection import SourceConnection, TlsSettings, TlsSettingsError
from datalayer.discovery import (
    Discovery,
    DiscoverySink,
    EndpointsFileError,
    FileDiscovery,
    KubePoolDiscovery,
    KubeSelectorDiscovery,
    StaticDiscovery,
    load_endpoints_file,
    parse_endpoint_list,
    parse_selector,
)
from datalayer.engines import (
    BUILTIN_ENGINES,
    DEFAULT_ENGINE,
    EngineConfigError,
    EngineMapping,
    MetricSpec,
    apply_metric_overrides,
    parse_engine_configs,
    parse_spec,
)
from datalayer.http import (
    AiohttpClient,
    FetchError,
    HttpClient,
    HttpResponse,
    default_http_client,
)
from datalayer.http.rawhttp import RawHttpClient
from datalayer.layer import DataLayer, DataLayerOptions
from datalayer.records import (
    ENGINE_LABEL,
    DiscoveryEvent,
    EndpointMetrics,
    EndpointRecord,
    EndpointSpec,
    EventKind,
    Health,
)
from datalayer.sources import (
    CoreMetricsExtractor,
    DataSource,
    MetricsDataSource,
    MetricsExtractor,
    ModelsDataSource,
    ModelsExtractor,
    SourceUpdate,
)

__all__ = [
    "BUILTIN_ENGINES",
    "DEFAULT_ENGINE",
    "ENGINE_LABEL",
    "AiohttpClient",
    "CoreMetricsExtractor",
    "DataLayer",
    "DataLayerConfig",
    "DataLayerConfigError",
    "DataLayerOptions",
    "DataSource",
    "Discovery",
    "DiscoveryEvent",
    "DiscoverySink",
    "EndpointMetrics",
    "EndpointRecord",
    "EndpointSpec",
    "EndpointsFileError",
    "EngineConfigError",
    "EngineMapping",
    "EventKind",
    "FetchError",
    "FileDiscovery",
    "Health",
    "HttpClient",
    "HttpResponse",
    "KubePoolDiscovery",
    "KubeSelectorDiscovery",
    "MetricSpec",
    "MetricsDataSource",
    "MetricsExtractor",
    "ModelsDataSource",
    "ModelsExtractor",
    "PoolAggregates",
    "RawHttpClient",
    "SourceConnection",
    "SourceUpdate",
    "StaticDiscovery",
    "TlsSettings",
    "TlsSettingsError",
    "apply_metric_overrides",
    "default_http_client",
    "load_endpoints_file",
    "parse_endpoint_list",
    "parse_engine_configs",
    "parse_selector",
    "parse_spec",
    "plugin_factories",
    "pool_aggregates",
    "validate_datalayer_section",
]
