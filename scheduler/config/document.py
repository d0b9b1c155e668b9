"""Structural validation of an ``EndpointPickerConfig`` document (no plugin is built here).

Top-level fields: ``apiVersion`` (required: ``inference.networking.x-k8s.io/v1alpha1`` or
``llm-d.ai/v1alpha1``), ``kind`` (required: ``EndpointPickerConfig``), ``plugins`` (list of
``{type, name?, parameters?}``; name defaults to type; names unique), ``schedulingProfiles`` (list of
``{name, plugins: [{pluginRef, weight?}], shadow?}``; names unique; a plugin at most once per
profile; weight a finite number), ``saturationDetector`` (``{pluginRef}``, or GIE's legacy threshold
fields, which configure an implicit ``utilization-detector``). Every other top-level key is an
*external section* validated by a caller-supplied validator (``dataLayer``, ``data``, ``flowControl``,
``parser``, ``featureGates``, ...); a section without a validator is rejected as not supported yet.
Unknown fields anywhere are errors. Errors are ConfigError with the path in the document, e.g.
``schedulingProfiles[0].plugins[2].pluginRef``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from scheduler.errors import ConfigError, ErrorCollector, did_you_mean

__all__ = [
    "API_VERSION",
    "API_VERSIONS",
    "EXTERNAL_SECTIONS",
    "KIND",
    "LEGACY_API_VERSION",
    "LEGACY_SATURATION_FIELDS",
    "ConfigDocument",
    "PluginRefSpec",
    "PluginSpec",
    "ProfileSpec",
    "SaturationSpec",
    "SectionValidator",
    "parse_document",
]

LEGACY_API_VERSION = "inference.networking.x-k8s.io/v1alpha1"
"""GIE's apiVersion (deprecated by llm-d-router): plugins that predate the producer model keep their
own state when no producer is configured (see :mod:`scheduler.producers`)."""
API_VERSION = "llm-d.ai/v1alpha1"
"""llm-d-router's apiVersion: consumers get their default producers injected."""
API_VERSIONS = (LEGACY_API_VERSION, API_VERSION)
KIND = "EndpointPickerConfig"
EXTERNAL_SECTIONS = ("dataLayer", "data", "flowControl", "parser", "featureGates")
"""Sections owned by other parts of the EPP; validated only through registered validators."""
LEGACY_SATURATION_FIELDS = ("queueDepthThreshold", "kvCacheUtilThreshold", "metricsStalenessThreshold")
_OWN = ("apiVersion", "kind", "plugins", "schedulingProfiles", "saturationDetector")

SectionValidator = Callable[[Any, str], Any]
"""``validator(value, location) -> validated value``; raises ConfigError (location relative to root)."""


@dataclass(frozen=True, slots=True)
class PluginSpec:
    name: str
    type: str
    parameters: Mapping[str, Any]
    location: str  # "plugins[3]", or "(implicit)" for plugins the defaults added


@dataclass(frozen=True, slots=True)
class PluginRefSpec:
    ref: str
    weight: float | None
    location: str


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    name: str
    refs: tuple[PluginRefSpec, ...]
    shadow: bool
    location: str


@dataclass(frozen=True, slots=True)
class SaturationSpec:
    ref: str | None  # None: an implicit utilization-detector with ``parameters``
    parameters: Mapping[str, Any]
    location: str = "saturationDetector"


@dataclass(frozen=True, slots=True)
class ConfigDocument:
    api_version: str
    plugins: tuple[PluginSpec, ...]
    profiles: tuple[ProfileSpec, ...] | None  # None: not given
    saturation: SaturationSpec | None
    sections: Mapping[str, Any] = field(default_factory=dict)
    raw_sections: Mapping[str, Any] = field(default_factory=dict)


def _show(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _fail(location: str, message: str) -> NoReturn:
    raise ConfigError(message, location=location)


def _mapping(value: Any, location: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _fail(location, f"expected a mapping, got {_show(value)}")
    for key in value:
        if not isinstance(key, str):
            _fail(location, f"expected string keys, got {_show(key)}")
    return value


def _list(value: Any, location: str) -> list[Any]:
    if not isinstance(value, list):
        _fail(location, f"expected a list, got {_show(value)}")
    return value


def _string(value: Any, location: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(location, f"expected a non-empty string, got {_show(value)}")
    return value


def _only(mapping: Mapping[str, Any], allowed: tuple[str, ...], location: str) -> None:
    for key in mapping:
        if key not in allowed:
            path = f"{location}.{key}" if location else key
            _fail(path, f"unknown field{did_you_mean(key, allowed)} (allowed: {', '.join(allowed)})")


def parse_document(raw: Any, validators: Mapping[str, SectionValidator] | None = None) -> ConfigDocument:
    """Validate the document's structure; raises ConfigError naming the location and expectation."""
    validators = validators or {}
    if raw is None:
        _fail("", "empty configuration document")
    doc = _mapping(raw, "(document)")
    # apiVersion and kind first: upstream's decoder rejects an unknown group before reading any field
    api_version = doc.get("apiVersion")
    if api_version not in API_VERSIONS:
        _fail("apiVersion", f"expected one of {', '.join(API_VERSIONS)}, got {_show(api_version)}")
    if doc.get("kind") != KIND:
        _fail("kind", f"expected {KIND}, got {_show(doc.get('kind'))}")
    sections: dict[str, Any] = {}
    raw_sections: dict[str, Any] = {}
    errors = ErrorCollector()  # every error of the document, not only the first
    for key, value in doc.items():
        if key in _OWN:
            continue
        with errors.part():
            validator = validators.get(key)
            if validator is None:
                if key in EXTERNAL_SECTIONS:
                    _fail(key, "section not supported yet (no validator is registered for it in this build)")
                names = (*_OWN, *sorted(validators))
                _fail(key, f"unknown field{did_you_mean(key, names)} (allowed: {', '.join(names)})")
            sections[key] = validator(value, key)
            raw_sections[key] = value
    plugins: tuple[PluginSpec, ...] = ()
    with errors.part():
        plugins = _plugins(doc.get("plugins"), errors)
    profiles = None
    if doc.get("schedulingProfiles") is not None:
        with errors.part():
            profiles = _profiles(doc["schedulingProfiles"], errors)
    saturation = None
    if "saturationDetector" in doc:
        with errors.part():
            saturation = _saturation(doc["saturationDetector"])
    errors.raise_if_any()
    return ConfigDocument(str(api_version), plugins, profiles, saturation, sections, raw_sections)


def _plugins(value: Any, errors: ErrorCollector) -> tuple[PluginSpec, ...]:
    if value is None:
        return ()
    out: list[PluginSpec] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(_list(value, "plugins")):
        with errors.part():
            _plugin(i, item, seen, out)
    return tuple(out)


def _plugin(i: int, item: Any, seen: dict[str, str], out: list[PluginSpec]) -> None:
    where = f"plugins[{i}]"
    entry = _mapping(item, where)
    _only(entry, ("name", "type", "parameters"), where)
    if "type" not in entry:
        _fail(f"{where}.type", "required field missing: expected a plugin type")
    plugin_type = _string(entry["type"], f"{where}.type")
    name = _string(entry["name"], f"{where}.name") if entry.get("name") is not None else plugin_type
    if name in seen:
        _fail(f"{where}.name", f'duplicate plugin name "{name}" (already declared at {seen[name]})')
    seen[name] = where
    parameters = entry.get("parameters")
    if parameters is None:
        parameters = {}
    out.append(PluginSpec(name, plugin_type, _mapping(parameters, f"{where}.parameters"), where))


def _profiles(value: Any, errors: ErrorCollector) -> tuple[ProfileSpec, ...]:
    out: list[ProfileSpec] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(_list(value, "schedulingProfiles")):
        with errors.part():
            _profile(i, item, seen, out)
    return tuple(out)


def _profile(i: int, item: Any, seen: dict[str, str], out: list[ProfileSpec]) -> None:
    where = f"schedulingProfiles[{i}]"
    entry = _mapping(item, where)
    _only(entry, ("name", "plugins", "shadow"), where)
    if "name" not in entry:
        _fail(f"{where}.name", "required field missing: expected a profile name")
    name = _string(entry["name"], f"{where}.name")
    if name in seen:
        _fail(f"{where}.name", f'duplicate profile name "{name}" (already declared at {seen[name]})')
    seen[name] = where
    shadow = entry.get("shadow", False)
    if not isinstance(shadow, bool):
        _fail(f"{where}.shadow", f"expected a boolean (true or false), got {_show(shadow)}")
    refs: list[PluginRefSpec] = []
    used: dict[str, str] = {}
    for j, ref_item in enumerate(_list(entry.get("plugins") or [], f"{where}.plugins")):
        ref_where = f"{where}.plugins[{j}]"
        ref_entry = _mapping(ref_item, ref_where)
        _only(ref_entry, ("pluginRef", "weight"), ref_where)
        if "pluginRef" not in ref_entry:
            _fail(f"{ref_where}.pluginRef", "required field missing: expected the name of a plugin")
        ref = _string(ref_entry["pluginRef"], f"{ref_where}.pluginRef")
        if ref in used:
            _fail(f"{ref_where}.pluginRef", f'plugin "{ref}" is already used in this profile at {used[ref]}')
        used[ref] = ref_where
        refs.append(PluginRefSpec(ref, _weight(ref_entry.get("weight"), f"{ref_where}.weight"), ref_where))
    out.append(ProfileSpec(name, tuple(refs), shadow, where))


def _weight(value: Any, location: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        _fail(location, f"expected a finite number, got {_show(value)}")
    return float(value)


def _saturation(value: Any) -> SaturationSpec:
    where = "saturationDetector"
    entry = _mapping(value if value is not None else {}, where)
    _only(entry, ("pluginRef", *LEGACY_SATURATION_FIELDS), where)
    legacy = {k: v for k, v in entry.items() if k in LEGACY_SATURATION_FIELDS}
    if "pluginRef" in entry:
        if legacy:
            _fail(
                f"{where}.{next(iter(legacy))}",
                "give either pluginRef or the threshold fields (which configure the referenced plugin)",
            )
        return SaturationSpec(_string(entry["pluginRef"], f"{where}.pluginRef"), {})
    return SaturationSpec(None, legacy)
