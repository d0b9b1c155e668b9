"""Observation seam of the scheduler: per-plugin latency, per-cycle latency and plugin errors.

The framework (not the plugins) times every plugin call with one ``perf_counter`` pair and reports it
to an injected :class:`SchedulerObserver`; the EPP service implements it with Prometheus histograms
(``plugin_duration_seconds{extension_point, plugin_type, plugin_name}``). Extension points are the
strings in :data:`EXTENSION_POINTS`. Cycle status is ``"ok"``, ``"no_endpoint"`` or ``"error"``.
Observers must be cheap and must not raise. An observer that also implements :class:`PluginTimers`
hands out one recording function per (extension point, plugin), which the framework asks for at that
plugin's first timed call and then calls directly (:func:`timed_plugin`), skipping the label lookup of
``observe_plugin``.

Plugin-owned metrics (upstream: families a plugin registers itself, such as the disaggregation
decision counters and the in-flight load gauges) go through the same seam: an observer that also
implements :class:`PluginMetrics` is handed, once, when the scheduler is built, to every plugin that
implements :class:`scheduler.interfaces.MetricsReporter`. Counters are reported per event
(``pd_decision`` / ``disagg_decision``); gauges are read at scrape time from the
:class:`InflightLoadSource` a plugin registers with ``watch_inflight_load``. A plugin never bound (no
such observer, e.g. the library used alone) reports to :data:`NO_PLUGIN_METRICS`, which drops
everything. An observer that also implements :class:`LatencyMetrics` receives the
``predicted-latency-producer``'s per-request TTFT/TPOT reports (actual, predicted, SLO) and its
prediction durations. ``program-aware-fairness`` exports its per-program gauges the same way, through the
separate :class:`ProgramFairnessMetrics` (an observer that lacks it leaves the plugin unexported).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "EXTENSION_POINTS",
    "NO_PLUGIN_METRICS",
    "InflightLoadSource",
    "InflightSample",
    "LatencyMetrics",
    "LatencyReport",
    "LoggingObserver",
    "PluginMetrics",
    "PluginTimers",
    "ProgramFairnessMetrics",
    "ProgramFairnessSource",
    "ProgramSample",
    "SchedulerObserver",
    "TimedPlugin",
    "timed_plugin",
]

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


@runtime_checkable
class PluginTimers(Protocol):
    """An observer that can hand out one plugin's recording function: ``plugin_timer(point, type,
    name)(seconds)`` must record exactly what ``observe_plugin(point, type, name, seconds)`` records.
    The framework asks for it at the first call it times, so a series appears when it is first
    observed, as with ``observe_plugin``; afterwards each call costs one call of that function."""

    def plugin_timer(
        self, extension_point: str, plugin_type: str, plugin_name: str
    ) -> Callable[[float], None]: ...


TimedPlugin = list[Any]
"""``[plugin, record]``: ``record(seconds)`` reports one call of ``plugin`` (see :func:`timed_plugin`)."""


def timed_plugin(observer: SchedulerObserver, extension_point: str, plugin: Any) -> TimedPlugin:
    """``[plugin, record]`` for the framework's timing of ``plugin`` at ``extension_point``.

    ``record(seconds)`` is the same as ``observer.observe_plugin(extension_point, plugin.plugin_type,
    plugin.name, seconds)``; for a :class:`PluginTimers` observer the entry swaps in the observer's own
    recording function at the first call (no label lookup per call afterwards)."""
    plugin_type, name = plugin.plugin_type, plugin.name
    if not isinstance(observer, PluginTimers):
        return [plugin, partial(observer.observe_plugin, extension_point, plugin_type, name)]
    entry: TimedPlugin = [plugin, None]

    def first(seconds: float) -> None:
        record = observer.plugin_timer(extension_point, plugin_type, name)
        entry[1] = record
        record(seconds)

    entry[1] = first
    return entry


@dataclass(frozen=True, slots=True)
class InflightSample:
    """One series of the in-flight load gauges: what one endpoint holds for one (fairness id, priority).

    ``endpoint_name`` is the endpoint's name (its address when it has none); ``requests`` and
    ``tokens`` are the current totals (>= 0).
    """

    endpoint_name: str
    fairness_id: str
    priority: int
    requests: int
    tokens: int


class InflightLoadSource(Protocol):
    """A plugin whose in-flight counts are exported as gauges (``inflight-load-producer``)."""

    @property
    def name(self) -> str: ...

    def inflight_samples(self) -> Iterable[InflightSample]:
        """The current series, one per (endpoint, fairness id, priority) with anything charged.

        Called at scrape time, from the scheduler's thread; must not mutate the plugin.
        """
        ...


@runtime_checkable
class PluginMetrics(Protocol):
    """Metric families owned by plugins, as upstream's plugins register them.

    ``pd_decision``: one ``pd-profile-handler`` decision (``decode-only`` or ``prefill-decode``);
    ``disagg_decision``: one ``disagg-profile-handler`` routing decision (``decode-only``,
    ``prefill-decode``, ``encode-decode`` or ``encode-prefill-decode``). ``model_name`` is the
    request's target model ("" is reported as ``unknown``). ``watch_inflight_load``: export a
    source's counts at every scrape (a source with the same name replaces the earlier one).
    Implementations must be cheap and must not raise.
    """

    def pd_decision(
        self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str
    ) -> None: ...

    def disagg_decision(
        self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str
    ) -> None: ...

    def watch_inflight_load(self, source: InflightLoadSource) -> None: ...


@dataclass(frozen=True, slots=True)
class LatencyReport:
    """One request's latencies as the ``predicted-latency-producer`` saw them, in seconds.

    ``ttft``: dispatch to the first response chunk (streaming mode) or to the end of the response;
    ``predicted_ttft``: the prediction for the endpoint that served the prefill (0 when none was made);
    ``ttft_slo``: the ``x-slo-ttft-ms`` header in seconds (0: none). ``tpot``: ``(end - first chunk) /
    (completion tokens - 1)`` (None outside streaming mode or with fewer than two tokens);
    ``predicted_tpot``: the decode endpoint's prediction (0 when none); ``tpot_slo``: ``x-slo-tpot-ms``
    in seconds (0: none).
    """

    model_name: str
    target_model_name: str
    ttft: float
    predicted_ttft: float
    ttft_slo: float
    tpot: float | None
    predicted_tpot: float
    tpot_slo: float


@runtime_checkable
class LatencyMetrics(Protocol):
    """The ``predicted-latency-producer``'s families (upstream: its own ``metrics.go``).

    ``latency_observed``: one successful request's :class:`LatencyReport`; ``latency_predicted``:
    one scheduling cycle's predictions for all candidates took ``seconds``. Cheap, must not raise.
    """

    def latency_observed(self, plugin_type: str, plugin_name: str, report: LatencyReport) -> None: ...

    def latency_predicted(
        self, plugin_type: str, plugin_name: str, model_name: str, target_model_name: str, seconds: float
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class ProgramSample:
    """What ``program-aware-fairness`` last reported for one program (fairness id).

    ``avg_wait_ms``: the running mean of its flow-control queue wait in milliseconds, as of its last
    dispatch (None before its first dispatch); ``attained_service``: its time-decayed attained service
    in weighted tokens, as of its last completion (None before its first completion).
    """

    program_id: str
    avg_wait_ms: float | None
    attained_service: float | None


class ProgramFairnessSource(Protocol):
    """A ``program-aware-fairness`` plugin whose state is exported as gauges at every scrape."""

    @property
    def name(self) -> str: ...

    def program_samples(self) -> Iterable[ProgramSample]:
        """One sample per tracked program. Called at scrape time; must not mutate the plugin."""
        ...

    def fairness_index(self) -> float:
        """Jain's fairness index as of the last pick (0.0 before the first, as upstream's gauge)."""
        ...


@runtime_checkable
class ProgramFairnessMetrics(Protocol):
    """Exports ``llm_d_epp_program_aware_*`` from a watched source (one per plugin name)."""

    def watch_program_fairness(self, source: ProgramFairnessSource) -> None: ...


class _NoPluginMetrics:
    __slots__ = ()

    def pd_decision(self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str) -> None:
        return None

    def disagg_decision(
        self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str
    ) -> None:
        return None

    def watch_inflight_load(self, source: InflightLoadSource) -> None:
        return None


NO_PLUGIN_METRICS: PluginMetrics = _NoPluginMetrics()
"""What a plugin reports to until the scheduler binds it: nothing is recorded."""
