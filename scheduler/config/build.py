"""Turning a validated document into plugin instances, profiles and a profile handler.

Rules (GIE semantics):

* Plugins are instantiated in configuration order through the registry, with a shared
  :class:`~scheduler.handle.PluginHandle` (lookup of other plugins by name, seeded rng, clock); a
  plugin whose factory looks up one declared later gets it built first (llm-d's dependency order);
  a circular reference is an error naming the cycle.
  An unknown type or a bad parameter fails with the plugin's location, type and name.
* At most one plugin may be a profile handler; with none, a ``single-profile-handler`` is added.
* No ``schedulingProfiles``: one ``default`` profile with every filter, scorer and picker instance in
  configuration order (plugins referenced by ``saturationDetector`` excepted).
* In a profile, a referenced plugin is slotted by what it implements (filter, scorer, picker; a
  plugin implementing several is slotted into each); a scorer without weight gets 1.0; a weight on a
  plugin that is not a scorer, a second picker, a dangling or non-schedulable reference are errors.
  A profile without picker gets an implicit ``max-score-picker``.
* ``single-profile-handler`` (and any handler with a true ``routes_one_profile`` attribute, e.g.
  ``data-parallel-profile-handler``) accepts exactly one routed (non-shadow) profile; every
  configuration needs at least one routed profile.
* Data producers (:mod:`scheduler.producers`): every consumer's needed key is bound to the configured
  plugin producing it; a missing key whose producer the consumer named explicitly is an error at that
  parameter; otherwise the default producer type is added (implicit, named after its type), except
  under the legacy apiVersion for consumers that can work alone (GIE's self-contained plugins).
* ``saturationDetector.pluginRef`` must name a plugin implementing SaturationDetector; the legacy
  threshold fields (or no section at all) configure an implicit ``utilization-detector`` when that
  type is registered.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from scheduler.config.defaults import (
    DEFAULT_PICKER_TYPE,
    DEFAULT_PROFILE_HANDLER_TYPE,
    DEFAULT_PROFILE_NAME,
    DEFAULT_SATURATION_DETECTOR_TYPE,
)
from scheduler.config.document import (
    LEGACY_API_VERSION,
    ConfigDocument,
    PluginRefSpec,
    PluginSpec,
    ProfileSpec,
)
from scheduler.config.resolved import ResolvedConfig, ResolvedPlugin
from scheduler.errors import ConfigError, ErrorCollector, did_you_mean
from scheduler.handle import PluginHandle
from scheduler.interfaces import Filter, Picker, Plugin, ProfileHandler, SaturationDetector, Scorer
from scheduler.params import plugin_location
from scheduler.producers import DataConsumer, DataProducer
from scheduler.profile import SchedulerProfile
from scheduler.registry import Registry
from scheduler.roles import has_role

_log = logging.getLogger("scheduler.config")

__all__ = ["IMPLICIT", "build_config"]

IMPLICIT = "(implicit)"


def _label(plugin: Plugin) -> str:
    return f'{plugin.plugin_type} "{plugin.name}"'


class _ResolveFailure(Exception):
    """A plugin built on demand for another one's reference failed: its error is reported as is."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__(error.message)
        self.error = error


class _Builder:
    def __init__(self, registry: Registry, handle: PluginHandle) -> None:
        self.registry = registry
        self.handle = handle
        self.resolved: list[ResolvedPlugin] = []
        self.where: dict[str, str] = {}
        self._default_picker: Picker | None = None

    def default_picker(self) -> Picker:
        """The implicit max-score-picker shared by every profile that names no picker."""
        if self._default_picker is None:
            plugin = self.implicit(DEFAULT_PICKER_TYPE)
            assert isinstance(plugin, Picker) and has_role(plugin, Picker)
            self._default_picker = plugin
        return self._default_picker

    def create(self, spec: PluginSpec) -> Plugin:
        if spec.type not in self.registry:
            raise ConfigError(
                f'unknown plugin type "{spec.type}"{did_you_mean(spec.type, self.registry.types())} '
                f"(known: {', '.join(self.registry.types())})",
                location=f"{spec.location}.type",
            )
        try:
            plugin = self.registry.create(spec.type, spec.name, spec.parameters, self.handle)
        except _ResolveFailure:
            raise
        except ConfigError as exc:
            inner = exc.location or plugin_location(spec.type, spec.name)
            raise ConfigError(exc.message, location=self._prefix(spec, inner)) from None
        except Exception as exc:
            raise ConfigError(
                f"plugin could not be created: {exc!r}",
                location=self._prefix(spec, plugin_location(spec.type, spec.name)),
            ) from exc
        self.handle.add(plugin)
        self.resolved.append(ResolvedPlugin(spec, plugin))
        self.where[spec.name] = spec.location
        return plugin

    @staticmethod
    def _prefix(spec: PluginSpec, inner: str) -> str:
        return inner if spec.location == IMPLICIT else f"{spec.location} {inner}"

    def declared(self) -> str:
        names = [r.plugin.name for r in self.resolved if r.spec.location != IMPLICIT]
        return ", ".join(names) or "none"

    def implicit(self, plugin_type: str, parameters: Mapping[str, Any] | None = None) -> Plugin:
        name = plugin_type
        suffix = 1
        while name in self.where:
            suffix += 1
            name = f"{plugin_type}-{suffix}"
        return self.create(PluginSpec(name, plugin_type, parameters or {}, IMPLICIT))


def build_config(
    doc: ConfigDocument, registry: Registry, handle: PluginHandle, source: str = ""
) -> ResolvedConfig:
    """Instantiate and wire everything; raises ConfigError (without ``source``; the caller sets it)."""
    b = _Builder(registry, handle)
    declared = {spec.name: spec for spec in doc.plugins}
    building: list[str] = []
    errors = ErrorCollector()  # every plugin's error, then every profile's, not only the first
    failed: set[str] = set()

    def build_on_demand(name: str) -> Plugin | None:
        spec = declared.get(name)
        if spec is None or name in b.where:
            return None
        if name in building:
            cycle = " -> ".join([*building[building.index(name) :], name])
            raise _ResolveFailure(ConfigError(f"circular plugin references: {cycle}", location=spec.location))
        building.append(name)
        try:
            return b.create(spec)
        except ConfigError as exc:
            failed.add(name)
            raise _ResolveFailure(exc) from None
        except _ResolveFailure:
            failed.add(name)  # its reference failed: reported once, for the plugin that failed
            raise
        finally:
            building.pop()

    handle.resolver = build_on_demand
    try:
        for spec in doc.plugins:
            if spec.name not in b.where and spec.name not in failed:
                building.append(spec.name)
                try:
                    b.create(spec)
                except _ResolveFailure as failure:
                    errors.add(failure.error)
                    failed.add(spec.name)
                except ConfigError as exc:
                    errors.add(exc)
                    failed.add(spec.name)
                finally:
                    building.pop()
    finally:
        handle.resolver = None
    for profile in doc.profiles or ():  # references to undeclared plugins (a failed one says nothing more)
        for ref in profile.refs:
            if ref.ref not in b.where and ref.ref not in failed:
                where = f"{ref.location}.pluginRef" if ref.location != IMPLICIT else profile.location
                hint = did_you_mean(ref.ref, declared)
                message = f'no plugin named "{ref.ref}"{hint} (declared: {", ".join(declared) or "none"})'
                errors.add(ConfigError(message, location=where))
    errors.raise_if_any()
    _bind_data(doc.api_version, b)
    handler = _handler(b)
    detector, detector_names = _saturation(doc, b)
    specs = doc.profiles
    if not specs:
        specs = (_default_profile(b, detector_names),)
    profiles: dict[str, SchedulerProfile] = {}
    for profile in specs:
        with errors.part():
            profiles[profile.name] = _profile(profile, b)
    errors.raise_if_any()
    routed = [name for name, p in profiles.items() if not p.shadow]
    if not routed:
        raise ConfigError(
            "every profile is shadow: at least one profile must be routed", location="schedulingProfiles"
        )
    one_profile = handler.plugin_type == DEFAULT_PROFILE_HANDLER_TYPE or getattr(
        handler, "routes_one_profile", False
    )
    if one_profile and len(routed) > 1:
        raise ConfigError(
            f"{_label(handler)} routes exactly one profile, got {len(routed)} ({', '.join(routed)}); "
            "configure a profile handler for several profiles (e.g. disagg-profile-handler) "
            "or mark the others shadow: true",
            location="schedulingProfiles",
        )
    return ResolvedConfig(
        source=source,
        api_version=doc.api_version,
        plugins=tuple(b.resolved),
        profiles=profiles,
        handler=handler,
        saturation_detector=detector,
        sections=dict(doc.sections),
        raw_sections=dict(doc.raw_sections),
        handle=handle,
    )


def _bind_data(api_version: str, b: _Builder) -> None:
    legacy = api_version == LEGACY_API_VERSION
    i = 0
    while i < len(b.resolved):  # grows while default producers are added; they are wired in turn
        resolved = b.resolved[i]
        i += 1
        plugin, where = resolved.plugin, resolved.spec.location
        if not isinstance(plugin, DataConsumer):
            continue
        for need in plugin.data_needs():
            producer = _producer_of(b, need.key)
            if producer is None and need.explicit:
                raise ConfigError(
                    f"no plugin produces {need.key}: expected the name of a configured "
                    f"{need.default_producer} (declared: {b.declared()})",
                    location=f"{where}.parameters.{need.parameter}",
                )
            if producer is None and not need.explicit and need.optional:
                plugin.bind_producer(need.key, None)
                continue
            if producer is None and need.fallback_key and _producer_of(b, need.fallback_key):
                plugin.bind_producer(need.key, None)
                continue
            if producer is None and not (legacy and need.legacy_self_contained):
                if need.default_producer in b.where:
                    raise ConfigError(
                        f'{_label(plugin)} needs {need.key}, but the plugin named "{need.default_producer}" '
                        f"is not a {need.default_producer}",
                        location=b.where[need.default_producer],
                    )
                producer = b.create(PluginSpec(need.default_producer, need.default_producer, {}, IMPLICIT))
            plugin.bind_producer(need.key, producer)


def _producer_of(b: _Builder, key: str) -> Plugin | None:
    for resolved in b.resolved:
        if isinstance(resolved.plugin, DataProducer) and key in resolved.plugin.produced_keys():
            return resolved.plugin
    return None


def _handler(b: _Builder) -> ProfileHandler:
    handlers = [
        r.plugin
        for r in b.resolved
        if isinstance(r.plugin, ProfileHandler) and has_role(r.plugin, ProfileHandler)
    ]
    if len(handlers) > 1:
        first, second = handlers[0], handlers[1]
        raise ConfigError(
            f"second profile handler {_label(second)} (the first is {_label(first)} at "
            f"{b.where[first.name]}): a configuration takes exactly one profile handler",
            location=b.where[second.name],
        )
    if handlers:
        return handlers[0]
    plugin = b.implicit(DEFAULT_PROFILE_HANDLER_TYPE)
    assert isinstance(plugin, ProfileHandler) and has_role(plugin, ProfileHandler)
    return plugin


def _saturation(doc: ConfigDocument, b: _Builder) -> tuple[SaturationDetector | None, frozenset[str]]:
    spec = doc.saturation
    if spec is not None and spec.ref is not None:
        where = f"{spec.location}.pluginRef"
        if (
            spec.ref not in b.where
            and spec.ref == DEFAULT_SATURATION_DETECTOR_TYPE
            and spec.ref in b.registry
        ):
            b.implicit(DEFAULT_SATURATION_DETECTOR_TYPE)  # llm-d-router's ensureSaturationDetector
        if spec.ref not in b.where:
            raise ConfigError(f'no plugin named "{spec.ref}" (declared: {b.declared()})', location=where)
        plugin = b.handle.plugin(spec.ref)
        if not (isinstance(plugin, SaturationDetector) and has_role(plugin, SaturationDetector)):
            raise ConfigError(
                f"{_label(plugin)} is not a saturation detector "
                "(expected e.g. utilization-detector or concurrency-detector)",
                location=where,
            )
        return plugin, frozenset({spec.ref})
    if DEFAULT_SATURATION_DETECTOR_TYPE not in b.registry:
        if spec is not None and spec.parameters:
            raise ConfigError(
                f"the threshold fields need the {DEFAULT_SATURATION_DETECTOR_TYPE} plugin, not registered",
                location=spec.location,
            )
        return None, frozenset()
    try:
        plugin = b.implicit(DEFAULT_SATURATION_DETECTOR_TYPE, spec.parameters if spec else None)
    except ConfigError as exc:
        raise ConfigError(exc.message, location=f"saturationDetector: {exc.location}") from None
    assert isinstance(plugin, SaturationDetector) and has_role(plugin, SaturationDetector)
    return plugin, frozenset({plugin.name})


def _default_profile(b: _Builder, excluded: frozenset[str]) -> ProfileSpec:
    refs = [
        PluginRefSpec(r.plugin.name, None, IMPLICIT)
        for r in b.resolved
        if r.plugin.name not in excluded
        and r.spec.location != IMPLICIT
        and any(has_role(r.plugin, role) for role in (Filter, Scorer, Picker))
    ]
    return ProfileSpec(DEFAULT_PROFILE_NAME, tuple(refs), False, "schedulingProfiles (default)")


def _profile(spec: ProfileSpec, b: _Builder) -> SchedulerProfile:
    filters: list[Filter] = []
    scorers: list[tuple[Scorer, float]] = []
    picker: Picker | None = None
    picker_at = ""
    for ref in spec.refs:
        where = f"{ref.location}.pluginRef" if ref.location != IMPLICIT else spec.location
        if ref.ref not in b.where:
            raise ConfigError(f'no plugin named "{ref.ref}" (declared: {b.declared()})', location=where)
        plugin = b.handle.plugin(ref.ref)
        is_filter = has_role(plugin, Filter)
        is_scorer = has_role(plugin, Scorer)
        is_picker = has_role(plugin, Picker)
        if not (is_filter or is_scorer or is_picker):
            # upstream's SchedulerProfile.AddPlugins keeps only the interfaces a plugin implements: a
            # parser or a response reporter listed in a profile does nothing there (it still runs as a
            # plugin of the configuration)
            if ref.weight is not None:
                raise ConfigError(
                    f"{_label(plugin)} is not a scorer, so it takes no weight",
                    location=f"{ref.location}.weight",
                )
            _log.warning(
                "%s: %s is not a filter, scorer or picker; it has no role in profile %r (ignored there)",
                where,
                _label(plugin),
                spec.name,
            )
            continue
        if ref.weight is not None and not is_scorer:
            raise ConfigError(
                f"{_label(plugin)} is not a scorer, so it takes no weight", location=f"{ref.location}.weight"
            )
        if isinstance(plugin, Filter) and is_filter:
            filters.append(plugin)
        if isinstance(plugin, Scorer) and is_scorer:
            scorers.append((plugin, 1.0 if ref.weight is None else ref.weight))
        if isinstance(plugin, Picker) and is_picker:
            if picker is not None:
                raise ConfigError(
                    f'profile "{spec.name}" already has picker {_label(picker)} ({picker_at}); '
                    "a profile takes exactly one picker",
                    location=where,
                )
            picker, picker_at = plugin, where
    if picker is None:
        picker = b.default_picker()
    assert picker is not None
    return SchedulerProfile(spec.name, filters, scorers, picker, shadow=spec.shadow)
