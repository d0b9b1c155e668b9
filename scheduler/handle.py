"""The :class:`~scheduler.interfaces.Handle` given to plugin factories.

``rng(name)`` returns a ``random.Random`` seeded from ``f"{seed}/{name}"`` (string seeding is stable
across runs and platforms), so a plugin's random decisions depend only on the scheduler seed and the
plugin's name. ``plugin(name)`` looks up instances added so far with :meth:`PluginHandle.add` (during
configuration, plugins are added in configuration order; after construction every plugin is visible,
so a plugin may also resolve a reference lazily, at its first call). While a configuration is being
built, a name declared later in the file is built on demand through the ``resolver`` the builder
installs, so plugins may reference each other in any declaration order (llm-d sorts plugins by
their references the same way).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

from scheduler.interfaces import Plugin

__all__ = ["PluginHandle"]


class PluginHandle:
    __slots__ = ("_clock", "_plugins", "resolver", "seed")

    def __init__(self, seed: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.seed = seed
        self._clock = clock
        self._plugins: dict[str, Plugin] = {}
        self.resolver: Callable[[str], Plugin | None] | None = None
        """Builds a not-yet-added plugin by name (None: unknown); set only while a config is built."""

    def add(self, plugin: Plugin) -> None:
        if plugin.name in self._plugins:
            raise ValueError(f"duplicate plugin name {plugin.name!r}")
        self._plugins[plugin.name] = plugin

    def plugin(self, name: str) -> Plugin:
        try:
            return self._plugins[name]
        except KeyError:
            resolved = self.resolver(name) if self.resolver is not None else None
            if resolved is not None:
                return resolved
            raise KeyError(f"no plugin named {name!r} (known: {', '.join(self._plugins)})") from None

    @property
    def plugins(self) -> Mapping[str, Plugin]:
        return self._plugins

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}/{name}")

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock
