"""The scheduler: one scheduling cycle per request, plus the fan-out of lifecycle hooks.

``schedule(request, endpoints)``:

1. takes a snapshot (tuple) of ``endpoints`` and a ``CycleState(now=clock())``; every profile run
   of the cycle sees the same snapshot and instant;
2. runs every ``PrepareHook`` plugin (configuration order) on the snapshot;
3. loops ``handler.pick_profiles`` -> run each returned profile, until it returns no profile
   (a profile runs at most once per cycle; a handler returning one again is a contract error);
4. passes the results of the routed (non-shadow) profiles to ``handler.process_results``; shadow
   profile results are attached to the returned ``SchedulingResult.profile_results`` and to its
   ``decision`` record, and never routed;
5. merges the headers of every ``RequestHeadersProvider`` plugin (configuration order) into the
   result's headers.

Raises :class:`NoEndpointError` (empty pool, or no routable result; the reason joins the failure
reasons of the routed profiles, which name the profile and filter) or :class:`SchedulingError` (the
profile handler raised or broke its contract). Latency of every plugin call and of the whole cycle
goes to the injected observer; an observer that also implements
:class:`~scheduler.observer.PluginMetrics` is bound, at construction, to every
:class:`~scheduler.interfaces.MetricsReporter` plugin (the handler included) for the families
plugins own.

Hooks (``dispatched``, ``response_headers``, ``response_chunk``, ``completed``,
``endpoints_removed``) call every plugin implementing them, in configuration order; a plugin that
raises is reported to the observer and the remaining plugins still run. ``added_response_headers``
merges the headers of every ``ResponseHeadersProvider`` (configuration order, a later plugin wins
on the same name) for the response sent to the client. ``has_chunk_hooks`` and
friends let the caller skip per-chunk work when no plugin wants it. Not thread-safe: call from one
thread (the event loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from time import perf_counter
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.errors import NoEndpointError, SchedulingError
from scheduler.interfaces import (
    CompletionHook,
    DispatchHook,
    EndpointRemovalHook,
    MetricsReporter,
    Plugin,
    PrepareHook,
    ProfileHandler,
    RequestHeadersProvider,
    ResponseChunkHook,
    ResponseHeadersHook,
    ResponseHeadersProvider,
    SaturationDetector,
)
from scheduler.observer import LoggingObserver, PluginMetrics, SchedulerObserver, TimedPlugin, timed_plugin
from scheduler.profile import SchedulerProfile
from scheduler.types import (
    Completion,
    DecisionRecord,
    EndpointView,
    LLMRequest,
    ProfileDecision,
    ProfileResult,
    SchedulingResult,
)

__all__ = ["Scheduler"]


class Scheduler:
    def __init__(
        self,
        profiles: Mapping[str, SchedulerProfile],
        handler: ProfileHandler,
        plugins: Sequence[Plugin] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        observer: SchedulerObserver | None = None,
        saturation_detector: SaturationDetector | None = None,
    ) -> None:
        """``plugins``: every plugin instance of the configuration (for hooks), in configuration order."""
        if not profiles:
            raise ValueError("a scheduler needs at least one profile")
        self.profiles: Mapping[str, SchedulerProfile] = dict(profiles)
        self.handler = handler
        self.plugins = tuple(plugins)
        self.saturation_detector = saturation_detector
        self._clock = clock
        self._observer: SchedulerObserver = observer if observer is not None else LoggingObserver()
        self._shadow = frozenset(name for name, p in self.profiles.items() if p.shadow)
        # [plugin, record] per hook call site: record(seconds) is the observer's plugin timing
        obs = self._observer

        def timed(point: str, hook: type) -> list[TimedPlugin]:
            return [timed_plugin(obs, point, p) for p in self.plugins if isinstance(p, hook)]

        self._prepare_t = timed("prepare", PrepareHook)
        self._dispatch_t = timed("dispatched", DispatchHook)
        self._headers_t = timed("response_headers", ResponseHeadersHook)
        self._providers_t = timed("response_headers", ResponseHeadersProvider)
        self._chunks_t = timed("response_chunk", ResponseChunkHook)
        self._completed_t = timed("completed", CompletionHook)
        self._removed_t = timed("endpoints_removed", EndpointRemovalHook)
        self._request_headers_t = timed("request_headers", RequestHeadersProvider)
        self._handler_t: dict[str, TimedPlugin] = {
            point: timed_plugin(obs, point, handler) for point in ("pick_profiles", "process_results")
        }
        if isinstance(self._observer, PluginMetrics):
            owners = {id(p): p for p in (*self.plugins, handler) if isinstance(p, MetricsReporter)}
            for plugin in owners.values():
                plugin.bind_metrics(self._observer)

    @property
    def observer(self) -> SchedulerObserver:
        return self._observer

    @property
    def has_dispatch_hooks(self) -> bool:
        return bool(self._dispatch_t)

    @property
    def has_response_header_hooks(self) -> bool:
        return bool(self._headers_t)

    @property
    def has_response_header_providers(self) -> bool:
        """False when no plugin adds client response headers (the caller may skip the call)."""
        return bool(self._providers_t)

    @property
    def owned_request_headers(self) -> frozenset[str]:
        """Request headers some plugin owns (``owned_request_headers`` attribute, lower-case).

        The caller removes a client-sent copy of these that the result does not set, as llm-d's
        plugins delete them from the request (a client must not pick the prefill peer itself).
        """
        owned: set[str] = set()
        for plugin in self.plugins:
            owned.update(getattr(plugin, "owned_request_headers", ()))
        return frozenset(owned)

    @property
    def has_chunk_hooks(self) -> bool:
        """False when no plugin wants response chunks: the caller may skip body streaming work."""
        return bool(self._chunks_t)

    @property
    def first_chunk_only(self) -> bool:
        """True when every chunk hook needs only a response's first chunk (``first_chunk_only`` class
        attribute): the caller may call :meth:`response_chunk` for the first chunk alone."""
        return all(getattr(plugin, "first_chunk_only", False) for plugin, _ in self._chunks_t)

    @property
    def has_completion_hooks(self) -> bool:
        return bool(self._completed_t)

    # -- the scheduling cycle -----------------------------------------------------------------------

    def schedule(self, request: LLMRequest, endpoints: Sequence[EndpointView]) -> SchedulingResult:
        start = perf_counter()
        status = "error"
        try:
            result = self._cycle(request, tuple(endpoints))
            status = "ok"
            return result
        except NoEndpointError:
            status = "no_endpoint"
            raise
        finally:
            self._observer.observe_cycle(perf_counter() - start, status)

    def _cycle(self, request: LLMRequest, snapshot: tuple[EndpointView, ...]) -> SchedulingResult:
        if not snapshot:
            raise NoEndpointError("no endpoint available: the pool is empty")
        observer = self._observer
        cycle = CycleState(now=self._clock())
        for plugin, record in self._prepare_t:
            t0 = perf_counter()
            try:
                plugin.prepare(cycle, request, snapshot)
            except Exception as exc:
                observer.plugin_error("prepare", plugin.plugin_type, plugin.name, exc)
            record(perf_counter() - t0)
        handler = self.handler
        results: dict[str, ProfileResult | None] = {}
        decisions: list[ProfileDecision] = []
        while True:
            picked = self._call_handler(
                "pick_profiles", handler.pick_profiles, cycle, request, self.profiles, results
            )
            if not picked:
                break
            for name, profile in picked.items():
                if name in results:
                    label = f'{handler.plugin_type} "{handler.name}"'
                    raise SchedulingError(f'profile handler {label} picked profile "{name}" twice')
                result, decision = profile.run(cycle, request, snapshot, observer)
                results[name] = result
                decisions.append(decision)
        shadow = self._shadow
        routed = {n: r for n, r in results.items() if n not in shadow} if shadow else results
        try:
            outcome: SchedulingResult = self._call_handler(
                "process_results", handler.process_results, cycle, request, routed
            )
        except NoEndpointError as exc:
            failures = [d.failure for d in decisions if d.failure and d.profile not in shadow]
            raise NoEndpointError("; ".join(failures) if failures else exc.reason) from None
        if not outcome.endpoints:
            label = f'{handler.plugin_type} "{handler.name}"'
            raise SchedulingError(f"profile handler {label} returned a result without endpoints")
        shadow_run = tuple([n for n in results if n in shadow]) if shadow else ()
        profile_results: Mapping[str, ProfileResult] = outcome.profile_results
        if shadow_run:
            merged = dict(profile_results)
            for name in shadow_run:
                shadow_result = results[name]
                if shadow_result is not None:
                    merged[name] = shadow_result
            profile_results = merged
        record = DecisionRecord(request.request_id, tuple(decisions), outcome.primary_profile, shadow_run)
        headers = outcome.headers
        if self._request_headers_t:
            headers = self._add_request_headers(cycle, request, outcome)
        return SchedulingResult(outcome.primary_profile, outcome.endpoints, profile_results, headers, record)

    def _add_request_headers(
        self, cycle: CycleState, request: LLMRequest, outcome: SchedulingResult
    ) -> Mapping[str, str]:
        merged = dict(outcome.headers)
        observer = self._observer
        for plugin, record in self._request_headers_t:
            t0 = perf_counter()
            try:
                merged.update(plugin.request_headers(cycle, request, outcome))
            except Exception as exc:
                observer.plugin_error("request_headers", plugin.plugin_type, plugin.name, exc)
            record(perf_counter() - t0)
        return merged

    def _call_handler(self, point: str, method: Callable[..., Any], *args: Any) -> Any:
        handler = self.handler
        t0 = perf_counter()
        try:
            return method(*args)
        except NoEndpointError:
            raise
        except Exception as exc:
            self._observer.plugin_error(point, handler.plugin_type, handler.name, exc)
            raise SchedulingError(
                f'profile handler {handler.plugin_type} "{handler.name}" failed in {point}: {exc!r}'
            ) from exc
        finally:
            self._handler_t[point][1](perf_counter() - t0)

    # -- lifecycle hooks ----------------------------------------------------------------------------

    def dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        observer = self._observer
        for plugin, record in self._dispatch_t:
            t0 = perf_counter()
            try:
                plugin.on_dispatched(request, result)
            except Exception as exc:
                observer.plugin_error("dispatched", plugin.plugin_type, plugin.name, exc)
            record(perf_counter() - t0)

    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, status: int, headers: Mapping[str, str]
    ) -> None:
        observer = self._observer
        for plugin, record in self._headers_t:
            t0 = perf_counter()
            try:
                plugin.on_response_headers(request, result, status, headers)
            except Exception as exc:
                observer.plugin_error("response_headers", plugin.plugin_type, plugin.name, exc)
            record(perf_counter() - t0)

    def added_response_headers(
        self, request: LLMRequest, result: SchedulingResult, served: str | None
    ) -> Mapping[str, str]:
        """Headers for the client response: every provider's, merged in configuration order.

        ``served`` is the ``ip:port`` the proxy reported as having served the request (None when it
        reported none). A provider that raises is reported to the observer and adds nothing.
        """
        observer = self._observer
        added: dict[str, str] = {}
        for plugin, record in self._providers_t:
            t0 = perf_counter()
            try:
                added.update(plugin.response_headers(request, result, served))
            except Exception as exc:
                observer.plugin_error("response_headers", plugin.plugin_type, plugin.name, exc)
            record(perf_counter() - t0)
        return added

    def response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None:
        observer = self._observer
        for plugin, record in self._chunks_t:
            t0 = perf_counter()
            try:
                plugin.on_response_chunk(request, result, chunk)
            except Exception as exc:
                observer.plugin_error("response_chunk", plugin.plugin_type, plugin.name, exc)
            record(perf_counter() - t0)

    def completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        observer = self._observer
        for plugin, record in self._completed_t:
            t0 = perf_counter()
            try:
                plugin.on_completed(request, result, completion)
            except Exception as exc:
                observer.plugin_error("completed", plugin.plugin_type, plugin.name, exc)
            record(perf_counter() - t0)

    def endpoints_removed(self, addresses: frozenset[str]) -> None:
        if not addresses:
            return
        observer = self._observer
        for plugin, record in self._removed_t:
            t0 = perf_counter()
            try:
                plugin.on_endpoints_removed(addresses)
            except Exception as exc:
                observer.plugin_error("endpoints_removed", plugin.plugin_type, plugin.name, exc)
            record(perf_counter() - t0)
