"""Observation seam of the scheduler: per-plugin latency, per-cycle latency and plugin errors.

The framework (not the plugins) times every plugin call with one ``perf_counter`` pair and reports it
to an injected :class:`SchedulerObserver`; the EPP service implements it with Prometheus histograms
(``plugin_duration_seconds{extension_point, plugin_type, plugin_name}``). Extension points are the
strings in :data:`EXTENSION_POINTS`. Cycle status is ``"ok"``, ``"no_endpoint"`` or ``"error"``.
Observers must be cheap and must not raise.
"""

from __future__ import annotations

import logging
from typing import Protocol

__all__ = ["EXTENSION_POINTS", "LoggingObserver", "SchedulerObserver"]

EXTENSION_POINTS = (
    "prepare",
    "filter",
    "score",
    "pick",
    "pick_profiles",
    "process_results",
    "dispatched",
    "response_headers",
    "response_chunk",
    "completed",
    "endpoints_removed",
)

_log = logging.getLogger("scheduler")


class SchedulerObserver(Protocol):
    def observe_plugin(
        self, extension_point: str, plugin_type: str, plugin_name: str, seconds: float
    ) -> None:
        """One plugin call at ``extension_point`` took ``seconds``."""
        ...

    def observe_cycle(self, seconds: float, status: str) -> None:
        """One whole scheduling cycle took ``seconds`` and ended with ``status``."""
        ...

    def plugin_error(
        self, extension_point: str, plugin_type: str, plugin_name: str, error: BaseException
    ) -> None:
        """A plugin raised; the framework contained the error (the hook is skipped / the profile fails)."""
        ...


class LoggingObserver:
    """The default observer: records no timings, logs plugin errors to the ``scheduler`` logger."""

    __slots__ = ()

    def observe_plugin(
        self, extension_point: str, plugin_type: str, plugin_name: str, seconds: float
    ) -> None:
        return None

    def observe_cycle(self, seconds: float, status: str) -> None:
        return None

    def plugin_error(
        self, extension_point: str, plugin_type: str, plugin_name: str, error: BaseException
    ) -> None:
        _log.error(
            "plugin %s/%s failed at %s: %r", plugin_type, plugin_name, extension_point, error, exc_info=error
        )
