"""Admission: decide whether a request may be scheduled, and on which endpoints.

:meth:`Admitter.admit` applies, in order:

1. no endpoint in the snapshot -> 503 ``no ready endpoints in the pool``;
2. subset hint present (not None): keep only endpoints it names (:func:`select_subset`); none left
   (empty hint or no overlap) -> 503;
3. sheddable request (priority < 0) and the saturation detector reports the pool (the whole snapshot)
   saturated -> 429;
3b. every ``RequestAdmitter`` plugin (configuration order, e.g. ``probabilistic-admitter``) on the
   candidates: the first that returns a reason rejects with 429 and that reason;
4. readiness: only endpoints the data layer reports ``ready`` (discovered ready and scraped healthy:
   a stopped, crashed or unreachable server is not) are candidates. When none of the remaining
   endpoints is ready (e.g. before the first scrape, or while scraping itself is broken) all of them
   stay candidates rather than failing every request, as GIE's filters return all when none pass.

It returns the candidate endpoints for the scheduler or raises :class:`~epp.request.errors.RequestError`
(pass ``status``, ``error_type`` and ``message`` to ``Session.reject``). Pure apart from the injected
clock; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from epp.admission.subset_filter import select_subset
from epp.request.errors import RATE_LIMITED, UNAVAILABLE, RequestError
from scheduler.interfaces import RequestAdmitter, SaturationDetector
from scheduler.types import EndpointView, LLMRequest

__all__ = ["Admitter"]

_log = structlog.get_logger("epp.admission")


class Admitter:
    """Admission control in front of the scheduler.

    ``detector`` is the configuration's SaturationDetector plugin (None disables shedding; with flow
    control on, the flow controller queues instead of shedding, so it gets None);
    ``clock`` the monotonic clock shared with the data layer; ``admitters`` the configuration's
    RequestAdmitter plugins.
    """

    __slots__ = ("_admitters", "_clock", "_detector", "none_ready_total", "shed_total")

    def __init__(
        self,
        detector: SaturationDetector | None,
        clock: Callable[[], float],
        admitters: Sequence[RequestAdmitter] = (),
    ) -> None:
        self._detector = detector
        self._clock = clock
        self._admitters = tuple(admitters)
        self.shed_total = 0
        self.none_ready_total = 0

    def precheck(
        self, subset: frozenset[str] | None, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        """Steps 1 and 2 only (empty pool, subset hint): the candidates, or RequestError (503). Flow
        control runs it before queueing a request, so that one no endpoint can serve is not queued."""
        if not endpoints:
            raise RequestError(503, UNAVAILABLE, "no ready endpoints in the pool")
        if subset is None:
            return endpoints
        if not subset:
            raise RequestError(503, UNAVAILABLE, "the endpoint subset hint is empty")
        candidates = select_subset(endpoints, subset)
        if not candidates:
            raise RequestError(503, UNAVAILABLE, "no endpoint of the pool is in the endpoint subset hint")
        return candidates

    def admit(
        self, request: LLMRequest, subset: frozenset[str] | None, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        """The endpoints ``request`` may be scheduled on; RequestError (503/429) when rejected."""
        candidates = self.precheck(subset, endpoints)
        detector = self._detector
        if request.priority < 0 and detector is not None and detector.is_saturated(endpoints, self._clock()):
            self.shed_total += 1
            message = f"pool saturated: sheddable request (priority {request.priority}) rejected"
            raise RequestError(429, RATE_LIMITED, message)
        for admitter in self._admitters:
            try:
                reason = admitter.admit(request, candidates)
            except Exception:
                _log.exception("admitter failed", plugin=admitter.name, request_id=request.request_id)
                continue
            if reason is not None:
                self.shed_total += 1
                raise RequestError(429, RATE_LIMITED, reason)
        ready = [e for e in candidates if e.ready]
        if ready:
            return ready if len(ready) != len(candidates) else candidates
        self.none_ready_total += 1
        return candidates
