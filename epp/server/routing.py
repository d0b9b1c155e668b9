"""The scheduling step of a stream: snapshot -> admission -> scheduler -> session.

:meth:`Router.route` answers a :class:`~epp.protocol.actions.Schedule` action: it takes one snapshot of
the endpoints from the data layer, lets the admitter restrict it (subset hint, shedding), runs the
scheduler inline (pure CPU, no awaits) and returns what ``session.scheduled(result)`` or
``session.reject(...)`` returns. Rejections: admission's own status (503 / 429), 503 when the scheduler
finds no endpoint, 500 (short message, logged with the traceback) for any unexpected exception. As in
GIE, a header-only request (no body, e.g. ``GET /v1/models``) meeting an empty pool gets 500 ("no
endpoints available in the pool"); a request with a body gets admission's 503. It never raises for a
request's sake.

The seams are protocols so tests and benchmarks plug fakes: :class:`EndpointSource` (the data layer),
:class:`RequestScheduler` (the scheduler: ``schedule`` plus the lifecycle hooks fired by the servicer).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import structlog

from epp.admission import Admitter
from epp.protocol import Action, Schedule, Session
from epp.request.errors import INTERNAL_ERROR, UNAVAILABLE, RequestError
from epp.server.decisions import DecisionLog
from epp.server.metrics import RequestMetrics
from scheduler.errors import NoEndpointError
from scheduler.types import Completion, EndpointView, LLMRequest, SchedulingResult

__all__ = ["EndpointSource", "RequestScheduler", "Router"]

_log = structlog.get_logger("epp.routing")


class EndpointSource(Protocol):
    def snapshot(self) -> Sequence[EndpointView]:
        """Every endpoint of the pool with its latest state (immutable; cheap to call per request)."""
        ...


class RequestScheduler(Protocol):
    """What the server needs of :class:`scheduler.Scheduler`: one decision plus the lifecycle hooks."""

    def schedule(self, request: LLMRequest, endpoints: Sequence[EndpointView]) -> SchedulingResult: ...

    def dispatched(self, request: LLMRequest, result: SchedulingResult) -> None: ...

    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, status: int, headers: Mapping[str, str]
    ) -> None: ...

    def response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None: ...

    def completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None: ...


class Router:
    """Per-server scheduling step shared by every stream (no per-request state)."""

    __slots__ = ("_admitter", "_clock", "_decisions", "_metrics", "_on_result", "_scheduler", "_source")

    def __init__(
        self,
        source: EndpointSource,
        admitter: Admitter,
        scheduler: RequestScheduler,
        metrics: RequestMetrics,
        decisions: DecisionLog | None = None,
        clock: Callable[[], float] = time.perf_counter,
        on_result: Callable[[LLMRequest, SchedulingResult], None] | None = None,
    ) -> None:
        """``on_result`` sees every successful result (e.g. the prefix-cache hit metrics)."""
        self._source = source
        self._admitter = admitter
        self._scheduler = scheduler
        self._metrics = metrics
        self._decisions = decisions
        self._clock = clock
        self._on_result = on_result

    @property
    def scheduler(self) -> RequestScheduler:
        return self._scheduler

    def received(self, request: LLMRequest) -> None:
        """Count the request (the request counter and size histogram), once per request."""
        metrics = self._metrics
        metrics.received(
            metrics.bound(request.model, request.target_model, request.fairness_id, request.priority),
            request.body_size,
        )

    def precheck(self, session: Session, action: Schedule) -> list[Action] | None:
        """Before flow control queues a request: count it, and reject it (503) when no endpoint could
        serve it (empty pool, subset hint matching none). None: it may wait."""
        self.received(action.request)
        try:
            self._admitter.precheck(action.subset, self._source.snapshot())
        except RequestError as exc:
            return session.reject(exc.status, exc.error_type, exc.message)
        return None

    def route(
        self, session: Session, action: Schedule, *, counted: bool = False
    ) -> tuple[list[Action], float]:
        """The session's actions for ``action`` and the seconds spent scheduling. ``counted``: the
        request was already counted (by :meth:`precheck`)."""
        request = action.request
        metrics = self._metrics
        if not counted:
            self.received(request)
        start = self._clock()
        try:
            endpoints = self._source.snapshot()
            if action.header_only and not endpoints:  # GIE: Internal, "no pods available in datastore"
                return session.reject(500, INTERNAL_ERROR, "no endpoints available in the pool"), 0.0
            candidates = self._admitter.admit(request, action.subset, endpoints)
        except RequestError as exc:
            return session.reject(exc.status, exc.error_type, exc.message), 0.0
        try:
            result = self._scheduler.schedule(request, candidates)
        except RequestError as exc:
            metrics.attempt(request.target_model, None)
            return session.reject(exc.status, exc.error_type, exc.message), 0.0
        except NoEndpointError as exc:
            metrics.attempt(request.target_model, None)
            return session.reject(503, UNAVAILABLE, f"no endpoint: {exc.reason}"), 0.0
        except Exception:
            metrics.attempt(request.target_model, None)
            _log.exception("scheduling failed", request_id=request.request_id, model=request.model)
            return session.reject(500, INTERNAL_ERROR, "internal error in the endpoint picker"), 0.0
        seconds = self._clock() - start
        metrics.attempt(request.target_model, result)
        if self._decisions is not None:
            self._decisions.add(request, result, seconds)
        if self._on_result is not None:
            self._on_result(request, result)
        return session.scheduled(result), seconds
