"""The data-layer plugin types a ``dataLayer`` section can name, and what the section is made of.

* the built-in types (:data:`SOURCE_TYPES`, :data:`EXTRACTOR_TYPES`, :data:`DISCOVERY_TYPES`; together
  :data:`DATALAYER_PLUGIN_TYPES`) and which extractors each source can feed (:data:`ACCEPTS`);
* :func:`registered_types`: test-only extra types (the Go tests' fakes), scoped to a context;
* :class:`PluginSpec` / :class:`SourceSpec`: one plugin (type, name, validated parameters) and one
  source with its extractors; :class:`DataLayerConfigError`: a problem at a path of the document;
* :func:`validate_params`: a plugin's parameters (see :mod:`datalayer.params`);
* :func:`plugin_factories`: factories for the scheduler's plugin registry, so ``plugins`` entries of
  these types validate there.

The section itself (validation, reference resolution, building the sources) is :mod:`datalayer.config`,
which re-exports the public names of this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from datalayer.notifications import ENDPOINT_NOTIFICATION_SOURCE
from datalayer.params import ParamError, validate_plugin_params

__all__ = [
    "ACCEPTS",
    "DATALAYER_PLUGIN_TYPES",
    "DISCOVERY_TYPES",
    "EXTRACTOR_TYPES",
    "SOURCE_TYPES",
    "DataLayerConfigError",
    "DataLayerPlugin",
    "ExtraPluginType",
    "PluginSpec",
    "SourceSpec",
    "check_keys",
    "extractor_types",
    "plugin_factories",
    "registered_types",
    "source_types",
    "validate_params",
]


SOURCE_TYPES = ("metrics-data-source", "models-data-source", "dcgm-data-source", ENDPOINT_NOTIFICATION_SOURCE)
EXTRACTOR_TYPES = ("core-metrics-extractor", "models-data-extractor", "dcgm-extractor")
ACCEPTS = {  # the extractor types each source's output suits (upstream: the extractor's ExpectedInputType)
    "metrics-data-source": ("core-metrics-extractor",),
    "models-data-source": ("models-data-extractor",),
    "dcgm-data-source": ("dcgm-extractor",),
}
DISCOVERY_TYPES = ("file-discovery", "multicluster-file-discovery")
DATALAYER_PLUGIN_TYPES = frozenset(SOURCE_TYPES + EXTRACTOR_TYPES + DISCOVERY_TYPES)
"""Plugin types owned by the data layer (the scheduler's registry does not build them)."""


@dataclass(frozen=True, slots=True)
class ExtraPluginType:
    """A data-layer plugin type added by :func:`registered_types`: its role, and its parameter validator
    ``(parameters, location) -> validated`` (raising :class:`DataLayerConfigError`). Such a type
    validates and resolves like a built-in one; :meth:`DataLayerConfig.build_sources` refuses it."""

    plugin_type: str
    role: Literal["source", "extractor"]
    validate: Callable[[Any, str], Mapping[str, Any]]


_EXTRA: ContextVar[Mapping[str, ExtraPluginType]] = ContextVar(
    "extra_datalayer_types", default=MappingProxyType({})
)


@contextmanager
def registered_types(*extra: ExtraPluginType) -> Iterator[None]:
    """While active (in this context), the section also accepts ``extra`` types. For tests that load
    upstream fixtures naming the Go tests' fakes; never used by the server. ValueError for a type that
    is already known."""
    known = DATALAYER_PLUGIN_TYPES | set(_EXTRA.get())
    for t in extra:
        if t.plugin_type in known:
            raise ValueError(f"data-layer plugin type {t.plugin_type!r} is already registered")
    token = _EXTRA.set(MappingProxyType({**_EXTRA.get(), **{t.plugin_type: t for t in extra}}))
    try:
        yield
    finally:
        _EXTRA.reset(token)


def source_types() -> tuple[str, ...]:
    return SOURCE_TYPES + tuple(t for t, x in _EXTRA.get().items() if x.role == "source")


def extractor_types() -> tuple[str, ...]:
    return EXTRACTOR_TYPES + tuple(t for t, x in _EXTRA.get().items() if x.role == "extractor")


class DataLayerConfigError(ValueError):
    def __init__(self, message: str, location: str) -> None:
        self.message = message
        self.location = location
        super().__init__(f"{location}: {message}")


@dataclass(frozen=True, slots=True)
class PluginSpec:
    plugin_type: str
    name: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SourceSpec:
    plugin: PluginSpec
    extractors: tuple[PluginSpec, ...]


def check_keys(params: Mapping[str, Any], allowed: set[str], location: str) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise DataLayerConfigError(
            f"unknown parameter (expected one of {sorted(allowed)})", f"{location}.{unknown[0]}"
        )


def validate_params(plugin_type: str, parameters: Any, location: str) -> Mapping[str, Any]:
    """Validated parameters of a data-layer plugin (see :mod:`datalayer.params`)."""
    extra = _EXTRA.get().get(plugin_type)
    if extra is not None:
        return extra.validate(parameters, location)
    try:
        return validate_plugin_params(plugin_type, parameters, location)
    except ParamError as exc:
        raise DataLayerConfigError(exc.message, exc.location) from None


@dataclass(frozen=True, slots=True)
class DataLayerPlugin:
    """A data-layer plugin declared in ``plugins`` (what :func:`plugin_factories` builds)."""

    plugin_type: str
    name: str
    parameters: Mapping[str, Any]


def plugin_factories() -> Mapping[str, Callable[[str, Mapping[str, Any], Any], DataLayerPlugin]]:
    """Factories ``(name, parameters, handle) -> DataLayerPlugin`` for the scheduler's plugin registry,
    so that ``plugins`` entries of data-layer types validate (errors name the plugin and parameter)."""

    def factory_for(plugin_type: str) -> Callable[[str, Mapping[str, Any], Any], DataLayerPlugin]:
        def factory(name: str, parameters: Mapping[str, Any], handle: Any) -> DataLayerPlugin:
            where = f'({plugin_type} "{name}"): parameters'  # the scheduler's plugin_location style
            return DataLayerPlugin(plugin_type, name, validate_params(plugin_type, parameters, where))

        return factory

    return {t: factory_for(t) for t in sorted(DATALAYER_PLUGIN_TYPES)}
