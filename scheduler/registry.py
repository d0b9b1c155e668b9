"""The plugin registry: plugin type (the ``type`` key in configuration files) -> factory.

``factory(name, parameters, handle) -> plugin`` builds one plugin instance; it raises ConfigError for
bad parameters. Registering a type twice raises :class:`DuplicatePluginError`; there is no overriding.
In-tree plugins are assembled by :func:`scheduler.plugins.register_builtin`; out-of-tree plugins are
discovered from the ``epp.plugins`` entry-point group (entry-point name = plugin type, object = factory)
by :meth:`Registry.load_entry_points`, which validates each one when it is registered. Discovery
happens once at startup, never on the request path. Older type names stay accepted through
:meth:`Registry.register_alias` (the instance reports the new name). The registry is not
thread-safe for registration.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from scheduler.errors import ConfigError, did_you_mean
from scheduler.interfaces import Handle, Plugin, PluginFactory
from scheduler.params import plugin_location

__all__ = [
    "ENTRY_POINT_GROUP",
    "DuplicatePluginError",
    "PluginRegistrationError",
    "Registry",
    "default_registry",
]

ENTRY_POINT_GROUP = "epp.plugins"
_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


class PluginRegistrationError(ValueError):
    """A plugin could not be registered (bad type name, factory not callable, failed import)."""


class DuplicatePluginError(PluginRegistrationError):
    """A plugin type was registered twice."""


class Registry:
    """Plugin type -> factory, plus where each registration came from (for error messages)."""

    __slots__ = ("_aliases", "_factories", "_origins")

    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}
        self._origins: dict[str, str] = {}
        self._aliases: dict[str, str] = {}

    def register(self, plugin_type: str, factory: PluginFactory, *, origin: str = "builtin") -> None:
        """Add one plugin type. Raises PluginRegistrationError / DuplicatePluginError."""
        if not isinstance(plugin_type, str) or not _TYPE_RE.match(plugin_type):
            raise PluginRegistrationError(
                f"{origin}: invalid plugin type {plugin_type!r} "
                "(expected letters, digits, '-', '_', '.', '/')"
            )
        if plugin_type in self._factories or plugin_type in self._aliases:
            raise DuplicatePluginError(
                f"{origin}: plugin type {plugin_type!r} is already registered by {self._origins[plugin_type]}"
            )
        _check_factory(plugin_type, factory, origin)
        self._factories[plugin_type] = factory
        self._origins[plugin_type] = origin

    def register_alias(self, alias: str, plugin_type: str, *, origin: str = "builtin") -> None:
        """Accept ``alias`` (an older name) in configurations for the registered ``plugin_type``.

        The instance reports the canonical type; rendered configurations use it.
        """
        if plugin_type not in self._factories:
            raise PluginRegistrationError(f"{origin}: alias {alias!r} for unregistered type {plugin_type!r}")
        if alias in self._factories or alias in self._aliases:
            raise DuplicatePluginError(f"{origin}: plugin type {alias!r} is already registered")
        self._aliases[alias] = plugin_type
        self._origins[alias] = origin

    def canonical(self, plugin_type: str) -> str:
        """The registered type an alias stands for (the type itself otherwise)."""
        return self._aliases.get(plugin_type, plugin_type)

    def create(self, plugin_type: str, name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
        """Build one instance; checks that the factory returned a plugin of that type and name, and
        that its roles are unambiguous (:func:`scheduler.roles.check_roles`)."""
        plugin_type = self._aliases.get(plugin_type, plugin_type)
        factory = self._factories.get(plugin_type)
        if factory is None:
            raise ConfigError(
                f"unknown plugin type {plugin_type!r}{did_you_mean(plugin_type, self.types())} "
                f"(known: {', '.join(self.types())})"
            )
        plugin = factory(name, parameters, handle)
        if getattr(plugin, "name", None) != name or getattr(plugin, "plugin_type", None) != plugin_type:
            raise ConfigError(
                f"factory of {self._origins[plugin_type]} returned {plugin!r}, expected a plugin with "
                f"plugin_type {plugin_type!r} and name {name!r}",
                location=plugin_location(plugin_type, name),
            )
        from scheduler.roles import check_roles  # local: scheduler.plugins imports this module

        try:
            check_roles(plugin)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc.message} ({self._origins[plugin_type]})", location=plugin_location(plugin_type, name)
            ) from None
        return plugin

    def types(self) -> list[str]:
        return sorted(self._factories)

    def origin(self, plugin_type: str) -> str:
        return self._origins[plugin_type]

    def __contains__(self, plugin_type: object) -> bool:
        return plugin_type in self._factories or plugin_type in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self.types())

    def __len__(self) -> int:
        return len(self._factories)

    def load_entry_points(
        self,
        group: str = ENTRY_POINT_GROUP,
        discover: Callable[[str], Iterable[Any]] | None = None,
    ) -> list[str]:
        """Register every entry point of ``group``; returns the plugin types added.

        ``discover(group)`` yields objects with ``name``, ``value`` and ``load()`` (importlib.metadata
        entry points by default; tests pass synthetic ones).
        """
        eps = discover(group) if discover is not None else importlib.metadata.entry_points(group=group)
        added: list[str] = []
        for ep in eps:
            origin = f"entry point {ep.name} = {ep.value} (group {group})"
            try:
                factory = ep.load()
            except Exception as exc:
                raise PluginRegistrationError(f"{origin}: cannot be loaded: {exc!r}") from exc
            self.register(ep.name, factory, origin=origin)
            added.append(ep.name)
        return added


def _check_factory(plugin_type: str, factory: Any, origin: str) -> None:
    if not callable(factory):
        raise PluginRegistrationError(f"{origin}: factory for {plugin_type!r} is not callable: {factory!r}")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return  # builtins without a signature: accept, they fail loudly when called
    try:
        signature.bind("name", {}, None)
    except TypeError as exc:
        raise PluginRegistrationError(
            f"{origin}: factory for {plugin_type!r} must accept (name, parameters, handle): {exc}"
        ) from None


def default_registry(*, entry_points: bool = True) -> Registry:
    """Every in-tree plugin, plus the out-of-tree ones from the ``epp.plugins`` entry points."""
    from scheduler.plugins import register_builtin

    registry = Registry()
    register_builtin(registry)
    if entry_points:
        registry.load_entry_points()
    return registry
