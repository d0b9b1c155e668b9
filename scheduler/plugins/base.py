"""Base class and factory helpers for plugins.

A plugin module defines a class deriving from :class:`PluginBase` with a ``plugin_type`` class
variable (the registry key used in configuration files) and exports a ``factory`` built with
:func:`factory_with_params` or :func:`factory_without_params`::

    class MaxScorePicker(PluginBase):
        plugin_type = "max-score-picker"
        def __init__(self, name: str, params: PickerParams, rng: random.Random) -> None: ...

    def _build(name: str, params: PickerParams, handle: Handle) -> MaxScorePicker:
        return MaxScorePicker(name, params, handle.rng(name))

    factory = factory_with_params("max-score-picker", PickerParams, _build)

The factory parses the YAML ``parameters`` into the dataclass (raising ConfigError that names the
plugin, the parameter and the expectation) before the plugin is constructed. A plugin keeps its
parsed parameters in ``params`` so that the resolved configuration can render them with defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin, PluginFactory
from scheduler.params import parse_params, plugin_location

__all__ = ["PluginBase", "factory_with_params", "factory_without_params"]

P = TypeVar("P")


class PluginBase:
    """Stores the instance ``name``; subclasses set ``plugin_type`` (and ``params`` when they have any)."""

    plugin_type: ClassVar[str] = ""
    params: object | None = None

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def factory_with_params(
    plugin_type: str, params_type: type[P], build: Callable[[str, P, Handle], Plugin]
) -> PluginFactory:
    """A factory that parses ``parameters`` into ``params_type`` and calls ``build(name, params, handle)``."""

    def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
        return build(name, parse_params(params_type, parameters, plugin_type, name), handle)

    return factory


def factory_without_params(plugin_type: str, build: Callable[[str, Handle], Plugin]) -> PluginFactory:
    """A factory for a plugin with no parameters: any given parameter is rejected."""

    def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
        if parameters:
            where = plugin_location(plugin_type, name)
            if not isinstance(parameters, Mapping):
                raise ConfigError(f"expected a mapping, got {parameters!r}", location=f"{where}: parameters")
            key = next(iter(parameters))
            raise ConfigError(
                f"unknown parameter ({plugin_type} takes no parameters)",
                location=f"{where}: parameters.{key}",
            )
        return build(name, handle)

    return factory
