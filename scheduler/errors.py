"""Errors raised by the scheduling framework and its configuration loader."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "ConfigErrors",
    "ErrorCollector",
    "NoEndpointError",
    "SchedulingError",
    "did_you_mean",
]


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


class ConfigErrors(ConfigError):
    """Several independent errors of one document, reported at once (one per line, in document order).

    Raised only with two or more errors (:meth:`ErrorCollector.raise_if_any` raises a single one as is).
    ``errors`` are the individual :class:`ConfigError` values."""

    def __init__(self, errors: Iterable[ConfigError], *, source: str = "") -> None:
        self.errors = tuple(e.at(source=source) if source else e for e in errors)
        first = self.errors[0]
        # message and location are the first error's, for code that reads one error
        super().__init__(
            f"{first.message} (and {len(self.errors) - 1} more)", location=first.location, source=first.source
        )

    def _render(self) -> str:
        return "\n".join(str(e) for e in self.errors)

    def at(self, *, location: str | None = None, source: str | None = None) -> ConfigError:
        return ConfigErrors([e.at(location=location, source=source) for e in self.errors])


class ErrorCollector:
    """Collects ConfigErrors of independent parts (``with collector.part(): ...``) so that every error
    of a document is reported, not only the first; a repeated error is kept once."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def add(self, error: ConfigError) -> None:
        parts = error.errors if isinstance(error, ConfigErrors) else (error,)
        for part in parts:
            if all(str(part) != str(seen) for seen in self.errors):
                self.errors.append(part)

    def part(self) -> _Part:
        return _Part(self)

    def raise_if_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


class _Part:
    __slots__ = ("_collector",)

    def __init__(self, collector: ErrorCollector) -> None:
        self._collector = collector

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, ConfigError):
            self._collector.add(exc)
            return True
        return False


class SchedulingError(RuntimeError):
    """The scheduler could not produce a result (base class)."""


class NoEndpointError(SchedulingError):
    """No endpoint is left to route to. ``reason`` names the profile and the filter that emptied it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``'; did you mean "X"?'`` for the closest of ``choices`` to ``word`` (difflib ratio at least
    0.75), or ``""``: appended to "unknown ..." messages so a typo names its fix."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.75)
    return f'; did you mean "{close[0]}"?' if close else ""
