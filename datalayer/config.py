"""The ``dataLayer`` section of an EndpointPickerConfig: which data sources and extractors run.

Shape (GIE's)::

    plugins:
      - name: metrics                     # optional name; type is the registry key
        type: metrics-data-source
        parameters: {path: /metrics}      # see datalayer.params for every parameter
      - type: core-metrics-extractor
        parameters:
          engineConfigs:                  # see datalayer.engines.parse_engine_configs
            - name: vllm
              queuedRequestsSpec: vllm:num_requests_waiting
    dataLayer:
      sources:
        - pluginRef: metrics
          extractors:
            - pluginRef: core-metrics-extractor
        - pluginRef: dcgm-data-source     # GPU utilization, see datalayer.dcgm
          extractors:
            - pluginRef: dcgm-extractor
        - pluginRef: models-data-source   # parameters: path (/v1/models), interval (5s)
          extractors:                     # optional: the models-data-extractor is the default
            - pluginRef: models-data-extractor

A ``pluginRef`` names an entry of ``plugins`` (by ``name``, defaulting to its ``type``) or, when no
entry has that name, a plugin type with default parameters. Pass the document's raw ``plugins`` list
to resolve references at validation; without it, named references stay unresolved until
:meth:`DataLayerConfig.resolve` (against instances built by :func:`plugin_factories`, which can be
registered with the scheduler's registry so ``plugins`` entries of these types validate). Absent
section: the default sources (metrics + core extractor, models). :func:`validate_datalayer_section` raises
:class:`DataLayerConfigError` (a ValueError) whose ``location`` is the path in the document.

``injectDefaults`` (llm-d-router; default true): when ``sources`` (possibly empty or absent) lists no
source of type ``metrics-data-source``, one is appended with the ``core-metrics-extractor`` (the
``plugins`` entries named ``metrics-data-source`` / ``core-metrics-extractor`` when declared, else
default parameters), as llm-d-router's loader does (it matches the reference's name; pyepp matches the
source's type, so a renamed metrics source is not scraped twice). ``injectDefaults: false`` without a
metrics source runs without metrics, as upstream does: the data layer then takes endpoints as ready
when discovered (see :class:`datalayer.layer.DataLayer`) and logs so at start.

Test seam: :func:`registered_types` adds data-layer plugin types (:class:`ExtraPluginType`) for the
duration of a ``with`` block, as the Go tests register their fakes (``test-source``, ``test-extractor``,
the integration harness's ``mock-metrics-source``). Only tests use it: the server knows the types above.

The plugin types, specs, parameter validation and registry factories are :mod:`datalayer.plugin_specs`
(re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from datalayer.dcgm import DcgmDataSource, DcgmExtractor
from datalayer.engines import BUILTIN_ENGINES, DEFAULT_ENGINE, EngineMapping
from datalayer.notifications import (
    ENDPOINT_NOTIFICATION_SOURCE,
    EndpointExtractor,
    EndpointNotificationSource,
)
from datalayer.plugin_specs import ACCEPTS as _ACCEPTS
from datalayer.plugin_specs import (
    DATALAYER_PLUGIN_TYPES,
    DISCOVERY_TYPES,
    EXTRACTOR_TYPES,
    SOURCE_TYPES,
    DataLayerConfigError,
    DataLayerPlugin,
    ExtraPluginType,
    PluginSpec,
    SourceSpec,
    plugin_factories,
    registered_types,
)
from datalayer.plugin_specs import check_keys as _check_keys
from datalayer.plugin_specs import extractor_types as _extractor_types
from datalayer.plugin_specs import source_types as _source_types
from datalayer.plugin_specs import validate_params as _validate_params
from datalayer.sources import (
    CoreMetricsExtractor,
    DataSource,
    MetricsDataSource,
    MetricsExtractor,
    ModelsDataSource,
    ModelsExtractor,
)

__all__ = [
    "DATALAYER_PLUGIN_TYPES",
    "DataLayerConfig",
    "DataLayerConfigError",
    "DataLayerPlugin",
    "ExtraPluginType",
    "PluginSpec",
    "SourceSpec",
    "default_datalayer_config",
    "plugin_factories",
    "registered_types",
    "validate_data_layer_section",
    "validate_datalayer_section",
]


@dataclass(frozen=True, slots=True)
class DataLayerConfig:
    """The validated section. ``plugin_type`` is empty for a reference to a ``plugins`` entry that
    is resolved later by :meth:`resolve` (with the instances built from the ``plugins`` list)."""

    sources: tuple[SourceSpec, ...]
    inject_defaults: bool = True
    discovery: PluginSpec | None = None  # dataLayer.discovery: the endpoint discovery plugin

    @property
    def resolved(self) -> bool:
        return all(p.plugin_type for s in self.sources for p in (s.plugin, *s.extractors))

    @property
    def engines(self) -> Mapping[str, EngineMapping] | None:
        """Engine mappings from a core-metrics-extractor's ``engineConfigs`` (None: built-ins)."""
        for source in self.sources:
            for extractor in source.extractors:
                engines = extractor.parameters.get("engines")
                if engines is not None:
                    return cast(Mapping[str, EngineMapping], engines)
        return None

    def resolve(self, plugins: Mapping[str, Any], location: str = "dataLayer") -> DataLayerConfig:
        """Resolve named references against plugin instances (objects with ``plugin_type``, ``name``,
        ``parameters``) keyed by name; raise :class:`DataLayerConfigError` for a missing or mistyped one."""

        def one(spec: PluginSpec, allowed: tuple[str, ...] | None, where: str) -> PluginSpec:
            if spec.plugin_type:
                return spec
            found = plugins.get(spec.name)
            if found is None:
                raise DataLayerConfigError(f"no plugin named {spec.name!r} in plugins", f"{where}.pluginRef")
            plugin_type = getattr(found, "plugin_type", "")
            if allowed is None:  # an endpoint source's extractor: any plugin (checked when bound)
                return PluginSpec(plugin_type, spec.name, {})
            if plugin_type not in allowed:
                raise DataLayerConfigError(
                    f"plugin {spec.name!r} has type {plugin_type!r}; expected one of {list(allowed)}",
                    f"{where}.pluginRef",
                )
            params = getattr(found, "parameters", {})
            if not isinstance(found, DataLayerPlugin):  # a DataLayerPlugin's are validated already
                params = _validate_params(plugin_type, params, f"{where}.pluginRef")
            return PluginSpec(plugin_type, spec.name, params)

        sources = []
        for i, source in enumerate(self.sources):
            where = f"{location}.sources[{i}]"
            plugin = one(source.plugin, _source_types(), where)
            kinds = None if plugin.plugin_type == ENDPOINT_NOTIFICATION_SOURCE else _extractor_types()
            extractors = tuple(
                one(e, kinds, f"{where}.extractors[{j}]") for j, e in enumerate(source.extractors)
            )
            sources.append(SourceSpec(plugin, extractors))
        if self.inject_defaults and not _has_metrics(sources):
            metrics = PluginSpec("", "metrics-data-source", {})
            core = PluginSpec("", "core-metrics-extractor", {})
            where = f"{location}.injectDefaults"
            sources.append(
                SourceSpec(
                    one(metrics, SOURCE_TYPES, where)
                    if "metrics-data-source" in plugins
                    else _default(metrics),
                    (
                        one(core, EXTRACTOR_TYPES, where)
                        if "core-metrics-extractor" in plugins
                        else _default(core),
                    ),
                )
            )
        return replace(_checked(tuple(sources), location, self.inject_defaults), discovery=self.discovery)

    def build_sources(
        self,
        *,
        engines: Mapping[str, EngineMapping] | None = None,
        metrics_path: str | None = None,
        models_interval: float | None = None,
    ) -> tuple[DataSource, ...]:
        """Instances for ``sources``; ``engines`` (e.g. with flag overrides applied) replaces the
        configured ones; ``metrics_path`` / ``models_interval`` apply where the config sets none.
        Raises ValueError when a ``defaultEngine`` is missing from ``engines``."""
        if not self.resolved:
            raise DataLayerConfigError("unresolved plugin reference (call resolve() first)", "dataLayer")
        engines = engines or self.engines or BUILTIN_ENGINES
        built: list[DataSource] = []
        for source in self.sources:
            p = source.plugin.parameters
            connection = p.get("connection")
            if source.plugin.plugin_type not in SOURCE_TYPES:
                raise DataLayerConfigError(
                    f"plugin type {source.plugin.plugin_type!r} is registered for tests only and cannot run",
                    "dataLayer.sources",
                )
            if source.plugin.plugin_type == ENDPOINT_NOTIFICATION_SOURCE:
                continue  # not polled: see endpoint_sources()
            if source.plugin.plugin_type == "dcgm-data-source":
                built.append(
                    DcgmDataSource(
                        source.plugin.name,
                        [DcgmExtractor(e.name) for e in source.extractors],
                        p["path"],
                        interval=p.get("interval"),
                        connection=connection,
                        use_node_address=p["useNodeAddress"],
                    )
                )
            elif source.plugin.plugin_type == "metrics-data-source":
                extractors: list[MetricsExtractor] = [
                    CoreMetricsExtractor(
                        e.name,
                        engines,
                        engine_label_key=e.parameters.get("engine_label_key", ""),
                        default_engine=e.parameters.get("default_engine", DEFAULT_ENGINE),
                    )
                    for e in source.extractors
                ]
                path = p.get("path", metrics_path or "/metrics")
                built.append(
                    MetricsDataSource(
                        source.plugin.name,
                        extractors,
                        path,
                        interval=p.get("interval"),
                        connection=connection,
                    )
                )
            else:
                interval = p.get("interval")
                if interval is None:
                    interval = models_interval or 5.0
                path = p.get("path", "/v1/models")
                models = [ModelsExtractor(e.name) for e in source.extractors]
                built.append(
                    ModelsDataSource(
                        source.plugin.name, path, interval, connection=connection, extractors=models
                    )
                )
        return tuple(built)

    def endpoint_sources(
        self, plugin: Callable[[str], Any], location: str = "dataLayer"
    ) -> tuple[EndpointNotificationSource, ...]:
        """The endpoint-notification sources, their extractors bound to the plugin instances
        (``plugin(name)``, e.g. the resolved configuration's). Raises :class:`DataLayerConfigError`
        for an extractor that does not implement :class:`~datalayer.notifications.EndpointExtractor`."""
        built = []
        for i, source in enumerate(self.sources):
            if source.plugin.plugin_type != ENDPOINT_NOTIFICATION_SOURCE:
                continue
            extractors = []
            for j, spec in enumerate(source.extractors):
                found = plugin(spec.name)
                if not isinstance(found, EndpointExtractor):
                    raise DataLayerConfigError(
                        f"{ENDPOINT_NOTIFICATION_SOURCE} {source.plugin.name!r} requires an endpoint "
                        f"extractor; plugin {spec.name!r} ({spec.plugin_type}) does not implement "
                        "extract_endpoint",
                        f"{location}.sources[{i}].extractors[{j}].pluginRef",
                    )
                extractors.append(found)
            built.append(EndpointNotificationSource(source.plugin.name, extractors))
        return tuple(built)


def _any_ref(
    entry: Any, plugins: Mapping[str, tuple[int, Mapping[str, Any]]] | None, location: str
) -> PluginSpec:
    """An endpoint source's extractor: a declared plugin of any type (its parameters are the
    scheduler registry's business; whether it is an endpoint extractor is checked when bound)."""
    if not isinstance(entry, Mapping):
        raise DataLayerConfigError(f"expected a mapping with pluginRef, got {entry!r}", location)
    ref = entry.get("pluginRef")
    if not isinstance(ref, str) or not ref:
        raise DataLayerConfigError("expected a non-empty string", f"{location}.pluginRef")
    if plugins is None:
        return PluginSpec("", ref, {})
    if ref not in plugins:
        raise DataLayerConfigError(f"no plugin named {ref!r} in plugins", f"{location}.pluginRef")
    return PluginSpec(plugins[ref][1]["type"], ref, {})


def _ref(
    entry: Any,
    allowed: tuple[str, ...],
    plugins: Mapping[str, tuple[int, Mapping[str, Any]]] | None,
    location: str,
) -> PluginSpec:
    if not isinstance(entry, Mapping):
        raise DataLayerConfigError(f"expected a mapping with pluginRef, got {entry!r}", location)
    ref = entry.get("pluginRef")
    if not isinstance(ref, str) or not ref:
        raise DataLayerConfigError("expected a non-empty string", f"{location}.pluginRef")
    if plugins is not None and ref in plugins:
        index, raw = plugins[ref]
        plugin_type = raw["type"]
        if plugin_type not in allowed:
            raise DataLayerConfigError(
                f"plugin {ref!r} has type {plugin_type!r}; expected one of {list(allowed)}",
                f"{location}.pluginRef",
            )
        params = _validate_params(plugin_type, raw.get("parameters"), f"plugins[{index}].parameters")
        return PluginSpec(plugin_type, ref, params)
    if ref in allowed:
        return _default(PluginSpec("", ref, {}))
    if plugins is not None:
        raise DataLayerConfigError(
            f"no plugin named {ref!r} in plugins and not a type among {list(allowed)}",
            f"{location}.pluginRef",
        )
    return PluginSpec("", ref, {})  # a plugins entry by name, resolved by DataLayerConfig.resolve()


def _named(plugins: Sequence[Any] | None) -> dict[str, tuple[int, Mapping[str, Any]]] | None:
    if plugins is None:
        return None
    out: dict[str, tuple[int, Mapping[str, Any]]] = {}
    for i, entry in enumerate(plugins):
        if isinstance(entry, Mapping) and isinstance(entry.get("type"), str):
            name = entry.get("name") or entry["type"]
            if isinstance(name, str):
                out[name] = (i, entry)
    return out


def _checked(sources: tuple[SourceSpec, ...], location: str, inject: bool = True) -> DataLayerConfig:
    names = [s.plugin.name for s in sources]
    if len(set(names)) != len(names):
        raise DataLayerConfigError("a data source is listed twice", f"{location}.sources")
    for i, s in enumerate(sources):
        where = f"{location}.sources[{i}].extractors"
        kinds = [e.plugin_type for e in s.extractors if e.plugin_type]
        if len(set(kinds)) != len(kinds):  # upstream's ErrDuplicateExtractorType
            duplicate = next(k for k in kinds if kinds.count(k) > 1)
            raise DataLayerConfigError(f"two extractors of type {duplicate!r} on one source", where)
        accepts = _ACCEPTS.get(s.plugin.plugin_type)
        for j, e in enumerate(s.extractors):
            if accepts is not None and e.plugin_type and e.plugin_type not in accepts:
                raise DataLayerConfigError(
                    f"{s.plugin.plugin_type} cannot feed a {e.plugin_type} (its extractors: {list(accepts)})",
                    f"{where}[{j}].pluginRef",
                )
        if s.plugin.plugin_type == "metrics-data-source" and len(s.extractors) != 1:
            raise DataLayerConfigError("expected exactly one core-metrics-extractor", where)
    return DataLayerConfig(sources, inject)


def _default(spec: PluginSpec) -> PluginSpec:
    """The plugin of type ``spec.name`` with default parameters."""
    return PluginSpec(spec.name, spec.name, _validate_params(spec.name, None, spec.name))


def default_datalayer_config() -> DataLayerConfig:
    """Metrics (with the core extractor) and models sources with default parameters."""
    metrics = _default(PluginSpec("", "metrics-data-source", {}))
    core = _default(PluginSpec("", "core-metrics-extractor", {}))
    models = _default(PluginSpec("", "models-data-source", {}))
    return DataLayerConfig((SourceSpec(metrics, (core,)), SourceSpec(models, ())))


def validate_datalayer_section(
    section: Any, plugins: Sequence[Any] | None = None, location: str = "dataLayer"
) -> DataLayerConfig:
    """Validate the parsed ``dataLayer`` mapping (None: the default sources, built from the ``plugins``
    entries named ``metrics-data-source``, ``core-metrics-extractor``, ``models-data-source`` when
    declared).

    ``injectDefaults`` (default true, llm-d-router): when no metrics-data-source is listed in
    ``sources`` (which may be empty or absent), one with the core extractor is appended. With
    ``injectDefaults: false`` nothing is added: without a metrics-data-source no metrics are
    collected and endpoints are ready as soon as they are discovered.

    ``plugins`` is the document's raw ``plugins`` list when available; references to names not
    found there stay unresolved until :meth:`DataLayerConfig.resolve`.
    """
    if section is None:
        if plugins is None:
            return default_datalayer_config()
        named = _named(plugins)  # the defaults use declared plugins of the default names, as upstream
        models = _ref({"pluginRef": "models-data-source"}, SOURCE_TYPES, named, location)
        return _checked((_injected(named, location), SourceSpec(models, ())), location)
    if not isinstance(section, Mapping):
        raise DataLayerConfigError(f"expected a mapping, got {section!r}", location)
    _check_keys(section, {"sources", "injectDefaults", "discovery"}, location)
    discovery = _discovery(section.get("discovery"), _named(plugins), f"{location}.discovery")
    inject = section.get("injectDefaults", True)
    if inject is None:
        inject = True
    if not isinstance(inject, bool):
        raise DataLayerConfigError(f"expected true or false, got {inject!r}", f"{location}.injectDefaults")
    entries = section.get("sources")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise DataLayerConfigError("expected a list of sources", f"{location}.sources")
    _check_shape(entries, location)
    named = _named(plugins)
    sources: list[SourceSpec] = []
    for i, entry in enumerate(entries):
        where = f"{location}.sources[{i}]"
        plugin = _ref(entry, _source_types(), named, where)
        _check_keys(entry, {"pluginRef", "extractors"}, where)
        raw = entry.get("extractors") or []
        if not isinstance(raw, list):
            raise DataLayerConfigError("expected a list", f"{where}.extractors")
        if plugin.plugin_type == ENDPOINT_NOTIFICATION_SOURCE:
            extractors = tuple(_any_ref(e, named, f"{where}.extractors[{j}]") for j, e in enumerate(raw))
        else:
            extractors = tuple(
                _ref(e, _extractor_types(), named, f"{where}.extractors[{j}]") for j, e in enumerate(raw)
            )
        sources.append(SourceSpec(plugin, extractors))
    if inject and all(s.plugin.plugin_type for s in sources) and not _has_metrics(sources):
        sources.append(_injected(named, location))
    return replace(_checked(tuple(sources), location, inject), discovery=discovery)


def _discovery(
    value: Any, plugins: Mapping[str, tuple[int, Mapping[str, Any]]] | None, location: str
) -> PluginSpec | None:
    """``dataLayer.discovery: {pluginRef: NAME}``: a declared plugin implementing endpoint discovery."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise DataLayerConfigError(f"expected a mapping with pluginRef, got {value!r}", location)
    _check_keys(value, {"pluginRef"}, location)
    ref = value.get("pluginRef")
    if not isinstance(ref, str) or not ref:
        raise DataLayerConfigError("expected a non-empty string", f"{location}.pluginRef")
    if plugins is None:
        return PluginSpec("", ref, {})
    if ref not in plugins:
        raise DataLayerConfigError(f"no plugin found with name {ref!r}", f"{location}.pluginRef")
    index, raw = plugins[ref]
    if raw["type"] not in DISCOVERY_TYPES:
        raise DataLayerConfigError(
            f"plugin {ref!r} ({raw['type']}) does not implement EndpointDiscovery "
            f"(expected one of {list(DISCOVERY_TYPES)})",
            f"{location}.pluginRef",
        )
    params = _validate_params(raw["type"], raw.get("parameters"), f"plugins[{index}].parameters")
    return PluginSpec(raw["type"], ref, params)


def _check_shape(entries: list[Any], location: str) -> None:
    """Every source is ``{pluginRef, extractors?}`` and every extractor ``{pluginRef}``, checked for the
    whole list before any reference is resolved (upstream's decoder rejects a malformed entry, e.g. an
    extractor given as a bare name, before its loader looks a plugin up)."""
    for i, entry in enumerate(entries):
        where = f"{location}.sources[{i}]"
        _ref_shape(entry, where)
        _check_keys(entry, {"pluginRef", "extractors"}, where)
        raw = entry.get("extractors") or []
        if not isinstance(raw, list):
            raise DataLayerConfigError("expected a list", f"{where}.extractors")
        for j, extractor in enumerate(raw):
            _ref_shape(extractor, f"{where}.extractors[{j}]")
            _check_keys(extractor, {"pluginRef"}, f"{where}.extractors[{j}]")


def _ref_shape(entry: Any, location: str) -> None:
    if not isinstance(entry, Mapping):
        raise DataLayerConfigError(f"expected a mapping with pluginRef, got {entry!r}", location)
    ref = entry.get("pluginRef")
    if not isinstance(ref, str) or not ref:
        raise DataLayerConfigError("expected a non-empty string", f"{location}.pluginRef")


def _has_metrics(sources: Sequence[SourceSpec]) -> bool:
    return any(s.plugin.plugin_type == "metrics-data-source" for s in sources)


def _injected(named: Mapping[str, tuple[int, Mapping[str, Any]]] | None, location: str) -> SourceSpec:
    """The default metrics source + core extractor (``plugins`` entries of those names when declared)."""
    entry = {"pluginRef": "metrics-data-source", "extractors": [{"pluginRef": "core-metrics-extractor"}]}
    where = f"{location}.injectDefaults"
    for plugin_type in ("metrics-data-source", "core-metrics-extractor"):
        found = (named or {}).get(plugin_type)
        if found is not None and found[1].get("type") != plugin_type:
            raise DataLayerConfigError(
                f"the injected default {plugin_type} would be the plugin named {plugin_type!r}, which has "
                f"type {found[1].get('type')!r}; rename that plugin or set injectDefaults: false",
                f"plugins[{found[0]}].name",
            )
    plugin = _ref(entry, SOURCE_TYPES, named, where)
    return SourceSpec(plugin, (_ref(entry["extractors"][0], EXTRACTOR_TYPES, named, where),))


validate_data_layer_section = validate_datalayer_section
"""Alias (the name the epp service imports)."""
