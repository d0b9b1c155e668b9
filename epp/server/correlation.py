"""Request-id correlation between routing and observability streams, and deferred completion.

This module is the one place that links the two stream kinds of the ``observability`` Envoy variant
(see :mod:`epp.server.stream`). The routing stream does not see the response body there; a second
ext_proc stream in observability mode does (:mod:`epp.protocol.observability`). Both carry the same
``x-request-id`` (Envoy sets it before the filters run).

* :class:`AwaitingUsage`: the bounded, expiring map ``x-request-id`` -> what the metrics need. When a
  routing stream that will not see its response body dispatches a request, :meth:`UsageCorrelation.expect`
  remembers its model labels and start time; the observability stream takes the entry when its
  response ends (:meth:`UsageCorrelation.report`) and records the response size and usage metrics
  (tokens, NTPOT measured from the routing stream's start). The routing stream records neither, so
  nothing is counted twice.
* Deferred completion: exactly once per dispatch, as always. A routing stream that saw the response
  headers completed there (``response_header_mode: SEND``); the report then adds only usage metrics. A
  routing stream that ends while still DISPATCHED (Envoy closes it right after routing when the response
  phase is skipped, the shipped ``observability`` config) hands its completion to
  :meth:`UsageCorrelation.defer`, once this server has seen an observability stream: the report
  completes it with the real outcome (OK with usage, or the upstream status) when the response ends,
  so in-flight accounting lasts until then; if the observability stream is cut off
  (:meth:`UsageCorrelation.cut_off`), or never comes within the entry's TTL, it completes with the
  routing stream's own outcome. At shutdown nothing is deferred.

Bounds: at most ``capacity`` entries (the oldest is dropped beyond), each kept at most ``ttl_s`` seconds
(a request whose observability stream never comes). Entries are kept in insertion order, which is
expiry order, so every operation is O(1) amortised.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from epp.protocol import Action, Observed, Session, State
from epp.server.metrics import RequestMetrics
from scheduler.types import DEFAULT_FAIRNESS_ID, LLMRequest, Outcome

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_TTL_S",
    "Awaited",
    "AwaitingUsage",
    "Complete",
    "Finish",
    "UsageCorrelation",
]

DEFAULT_CAPACITY = 10_000
DEFAULT_TTL_S = 600.0

Finish = Callable[[Observed | None], None]
"""A deferred completion: called with the observability stream's report, or None (complete without it)."""
Complete = Callable[[list[Action], "int | None"], None]
"""How a routing stream completes: ``complete(actions of its session, response bytes or None)``."""
_log = structlog.get_logger("epp.correlation")


@dataclass(frozen=True, slots=True)
class Awaited:
    """A dispatched request: its metric labels and when it was received (on the stream clock)."""

    model: str
    target_model: str
    started: float
    fairness_id: str = DEFAULT_FAIRNESS_ID
    priority: int = 0


class _Entry:
    __slots__ = ("awaited", "deadline", "finish")

    def __init__(self, deadline: float, awaited: Awaited) -> None:
        self.deadline = deadline
        self.awaited = awaited
        self.finish: Finish | None = None


class AwaitingUsage:
    """The bounded, expiring map. Not thread-safe; used from the event loop only."""

    __slots__ = ("_clock", "_entries", "capacity", "dropped", "ttl_s")

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if capacity <= 0 or ttl_s <= 0:
            raise ValueError(f"capacity and ttl_s must be positive, got {capacity} and {ttl_s}")
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.dropped = 0  # entries expired or evicted before their observability stream came

    def __len__(self) -> int:
        return len(self._entries)

    def expect(
        self,
        request_id: str,
        model: str,
        target_model: str,
        started: float,
        fairness_id: str = DEFAULT_FAIRNESS_ID,
        priority: int = 0,
    ) -> None:
        """Remember a dispatched request (a repeated id replaces the older entry)."""
        if not request_id:
            return
        now = self._clock()
        entries = self._entries
        old = entries.pop(request_id, None)
        entries[request_id] = _Entry(
            now + self.ttl_s, Awaited(model, target_model, started, fairness_id, priority)
        )
        self._expire(now)
        while len(entries) > self.capacity:
            self._drop(entries.popitem(last=False)[1])
        if old is not None:
            self._drop(old)

    def defer(self, request_id: str, finish: Finish) -> bool:
        """Attach ``finish`` to the entry of ``request_id``; False (nothing attached) when there is none."""
        self._expire(self._clock())
        entry = self._entries.get(request_id)
        if entry is None or entry.finish is not None:
            return False
        entry.finish = finish
        return True

    def take(self, request_id: str) -> tuple[Awaited, Finish | None] | None:
        """Remove the entry of ``request_id``: its request and deferred ``finish`` (None if unknown)."""
        self._expire(self._clock())
        entry = self._entries.pop(request_id, None)
        return None if entry is None else (entry.awaited, entry.finish)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and next(iter(entries.values())).deadline <= now:
            self._drop(entries.popitem(last=False)[1])

    def _drop(self, entry: _Entry) -> None:
        self.dropped += 1
        if entry.finish is not None:
            try:
                entry.finish(None)
            except Exception:
                _log.exception("deferred completion failed")


class UsageCorrelation:
    """Links routing streams to observability streams by ``x-request-id`` (module docstring).

    Counters: ``observations`` (reports matched to a routed request), ``unmatched_observations``
    (reports with no awaiting request); ``streams_seen`` is set by the first observability stream
    (from then on, deferring a completion is worth it). Not thread-safe; used from the event loop only.
    """

    __slots__ = ("_clock", "_metrics", "awaiting", "observations", "streams_seen", "unmatched_observations")

    def __init__(
        self,
        metrics: RequestMetrics,
        clock: Callable[[], float] = time.perf_counter,
        awaiting: AwaitingUsage | None = None,
    ) -> None:
        """``awaiting``: the map (default: :data:`DEFAULT_CAPACITY` entries, :data:`DEFAULT_TTL_S`)."""
        self._metrics = metrics
        self._clock = clock
        self.awaiting = awaiting if awaiting is not None else AwaitingUsage(clock=clock)
        self.observations = 0
        self.unmatched_observations = 0
        self.streams_seen = False

    def expect(self, request: LLMRequest, started: float) -> None:
        """A routing stream that will not see its response body dispatched ``request`` (received at
        ``started``, on the stream clock): await its observability stream."""
        self.awaiting.expect(
            request.request_id,
            request.model,
            request.target_model,
            started,
            request.fairness_id,
            request.priority,
        )

    def defer(self, session: Session, outcome: Outcome, complete: Complete) -> bool:
        """A routing stream ends with ``outcome``: hand its completion over to the observability stream
        of its request; False (the caller completes now) unless an observability stream was ever seen, the
        stream is not shutting down, its ``session`` is still DISPATCHED without seeing the response
        body, and its request is awaited. ``complete`` is called exactly once later: with the session's
        end as the report tells it, or with ``session.abort(outcome)`` when none comes."""
        request = session.request
        if (
            not self.streams_seen
            or outcome is Outcome.SHUTDOWN
            or session.state is not State.DISPATCHED
            or session.sees_response_body
            or request is None
        ):
            return False

        def finish(observed: Observed | None) -> None:
            if observed is None:
                complete(session.abort(outcome), None)
            else:
                actions = session.observed_end(observed.status, observed.usage, observed.complete)
                complete(actions, observed.response_bytes)

        return self.awaiting.defer(request.request_id, finish)

    def opened(self) -> None:
        """An observability stream started."""
        self.streams_seen = True

    def report(self, observed: Observed) -> None:
        """An observability stream's response ended: complete the deferred routing stream, or record
        the usage against the awaiting request (a 2xx complete response only: the routing stream's own
        completion already counts a failure)."""
        entry = self.awaiting.take(observed.request_id)
        if entry is None:
            self.unmatched_observations += 1
            _log.debug("observed response of no awaiting request", request_id=observed.request_id)
            return
        self.observations += 1
        awaited, finish = entry
        if finish is not None:
            finish(observed)
            return
        if not observed.complete or not 200 <= observed.status < 300:
            return
        try:
            seconds = self._clock() - awaited.started
            m = self._metrics
            labels = m.bound(awaited.model, awaited.target_model, awaited.fairness_id, awaited.priority)
            m.observed(labels, observed.usage, seconds, observed.response_bytes)
        except Exception:
            _log.exception("usage metrics failed", request_id=observed.request_id)

    def cut_off(self, request_id: str) -> None:
        """An observability stream ended before its response did: a routing stream that deferred its
        completion to it completes now, with its own outcome; an entry without a deferred completion is
        dropped (nothing will report its usage)."""
        if not request_id:
            return
        found = self.awaiting.take(request_id)
        if found is not None and found[1] is not None:
            found[1](None)
