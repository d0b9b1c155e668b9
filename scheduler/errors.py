"""Errors raised by the scheduling framework and its configuration loader."""

from __future__ import annotations

__all__ = ["ConfigError", "NoEndpointError", "SchedulingError"]


class ConfigError(ValueError):
    """Invalid configuration: names the file, the location in the document and what was expected.

    ``location`` is a path such as ``plugins[2].parameters.blockSizeTokens``.
    """

    def __init__(self, message: str, *, location: str = "", source: str = "") -> None:
        self.message = message
        self.location = location
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = ": ".join(p for p in (self.source, self.location) if p)
        return f"{where}: {self.message}" if where else self.message

    def at(self, *, location: str | None = None, source: str | None = None) -> ConfigError:
        """A copy with the location prefixed / the source set (used while unwinding nested parsing)."""
        loc = self.location
        if location:
            loc = f"{location}.{loc}" if loc and not loc.startswith("[") else f"{location}{loc}"
        return ConfigError(self.message, location=loc, source=source if source is not None else self.source)


class SchedulingError(RuntimeError):
    """The scheduler could not produce a result (base class)."""


class NoEndpointError(SchedulingError):
    """No endpoint is left to route to. ``reason`` names the profile and the filter that emptied it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
