"""The flow controller: requests wait here while the pool is saturated, and are dispatched — only then
scheduled — as capacity frees up.

:meth:`FlowController.offer` is called for every request with a body, after the empty-pool and subset
checks and before scheduling:

* nothing is queued and the pool is below the band's ceiling (the saturation detector's value against
  the usage-limit policy's ceiling for the request's band, 1.0 by default): None, the request is
  scheduled at once (the fast path: one saturation reading, no await; a share-limited fairness policy,
  ``fair-share-fairness-policy``, may hold back a flow over its share). The policy ranks every
  provisioned priority level (:mod:`epp.flowcontrol.levels`: 0, the configured bands, the
  InferenceObjectives' priorities, recently seen ones), as upstream, not only the bands that wait;
* otherwise the request joins the queues (:mod:`epp.flowcontrol.queues`) and a :class:`Ticket` is
  returned; the caller awaits :meth:`FlowController.wait`. Over capacity it is rejected at once.

Dispatch passes run on the event loop (``call_soon``) after every arrival, every completion
(:meth:`kick`, called by the stream core) and every ``poll_interval`` (5 ms) while requests wait, for
detectors that read scraped metrics. A pass first expires requests past their TTL, then pops requests
in strict priority order while the pool stays below the ceilings (stopping at the first gated band),
re-reading the saturation and the ceilings after each one. A popped request's ``dispatch`` callback
runs inside the pass: it schedules the request on the endpoints as they are at that moment and fires
the dispatch hooks, so in-flight accounting (e.g. ``concurrency-detector``'s) already counts it when
the next saturation reading is taken.

Outcomes (GIE's ``QueueOutcome`` names, the ``outcome`` metric label) and what the client gets:

==========================  ======  ===========================================================
``Dispatched``              —       scheduled and routed
``RejectedCapacity``        429     ``flow control: request rejected: <which limit> is full ...``
``RejectedOther``           503     arrived while the picker shuts down
``EvictedTTL``              503     ``flow control: request timed out in queue after <ttl>`` (TTL)
``EvictedContextCancelled`` 503     the client went away while queued (nobody reads the answer)
``EvictedOther``            503     still queued when the picker shut down
==========================  ======  ===========================================================

Bounds: the queues' (band and pool limits, :data:`~epp.flowcontrol.config.MAX_QUEUED_REQUESTS`); one
timer; no task per request (a queued request is its own stream's task awaiting a future).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

import structlog

from epp.flowcontrol.config import FlowControlConfig
from epp.flowcontrol.levels import PriorityLevels
from epp.flowcontrol.queues import FlowQueues, Item
from epp.request.errors import RATE_LIMITED, UNAVAILABLE, RequestError
from scheduler.interfaces import SaturationDetector
from scheduler.plugins.flowcontrol.interfaces import ShareLimitedFairness
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "DISPATCHED",
    "EVICTED_CANCELLED",
    "EVICTED_OTHER",
    "EVICTED_TTL",
    "REJECTED_CAPACITY",
    "REJECTED_OTHER",
    "FlowController",
    "FlowRecorder",
    "Ticket",
]

DISPATCHED = "Dispatched"
REJECTED_CAPACITY = "RejectedCapacity"
REJECTED_OTHER = "RejectedOther"
EVICTED_TTL = "EvictedTTL"
EVICTED_CANCELLED = "EvictedContextCancelled"
EVICTED_OTHER = "EvictedOther"

DEFAULT_POLL_INTERVAL_S = 0.005
_log = structlog.get_logger("epp.flowcontrol")


class FlowRecorder(Protocol):
    """Where outcomes go (the metrics); every call must be cheap and must not raise."""

    def outcome(self, request: LLMRequest, outcome: str, waited: float) -> None:
        """A terminal outcome after ``waited`` seconds in flow control (0 on the fast path)."""
        ...

    def enqueued(self, request: LLMRequest, outcome: str, seconds: float) -> None:
        """The enqueue step's outcome (``Dispatched`` for queued) and its duration."""
        ...

    def cycle(self, seconds: float) -> None:
        """One dispatch pass took ``seconds``."""
        ...


class Ticket:
    """A queued request: awaited by its stream, resolved by the controller exactly once."""

    __slots__ = ("dispatch", "future", "item", "request")

    def __init__(self, request: LLMRequest, future: asyncio.Future[RequestError | None],
                 dispatch: Callable[[], None]) -> None:  # fmt: skip
        self.request = request
        self.future = future
        self.dispatch = dispatch
        self.item: Item | None = None


class FlowController:
    """Queues, dispatch passes, TTL expiry and shutdown for one pool. Event-loop only."""

    def __init__(
        self,
        config: FlowControlConfig,
        detector: SaturationDetector | None,
        snapshot: Callable[[], Sequence[EndpointView]],
        now: Callable[[], float] = time.monotonic,
        recorder: FlowRecorder | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        perf: Callable[[], float] = time.perf_counter,
        objective_priorities: Callable[[], Collection[int]] | None = None,
    ) -> None:
        """``detector``: the pool's saturation detector (None: never saturated); ``now``: the clock the
        detector reads metric ages with (the data layer's); ``perf``: the clock of the cycle metric;
        ``objective_priorities``: the InferenceObjectives' priorities (provisioned priority levels)."""
        self.config = config
        self.queues = FlowQueues(config)
        self._detector = detector
        self._snapshot = snapshot
        self._now = now
        self._perf = perf
        self._recorder = recorder
        self._ceilings = config.usage_limit.ceilings
        self.levels = PriorityLevels(config.bands, objective_priorities)
        self._poll = poll_interval
        self._kicked = False
        self._timer: asyncio.TimerHandle | None = None
        self._empty_pool = False
        self._regime_since = -math.inf
        self.closed = False
        templates = [*config.bands.values(), config.default_band, config.default_negative_band]
        self._shares = any(isinstance(b.fairness, ShareLimitedFairness) for b in templates if b is not None)

    # -- request path

    def saturation(self, endpoints: Sequence[EndpointView] | None = None) -> float:
        """The detector's reading of the pool (0.0 without a detector)."""
        detector = self._detector
        if detector is None:
            return 0.0
        return detector.saturation(self._snapshot() if endpoints is None else endpoints, self._now())

    def offer(self, request: LLMRequest, dispatch: Callable[[], None]) -> Ticket | None:
        """None: schedule now. A Ticket: await :meth:`wait`. RequestError: rejected (429/503)."""
        recorder = self._recorder
        if self.closed:
            if recorder is not None:
                recorder.outcome(request, REJECTED_OTHER, 0.0)
            raise RequestError(503, UNAVAILABLE, "flow control: the endpoint picker is shutting down")
        queues = self.queues
        priority = request.priority
        levels = self.levels
        now = self._now()
        levels.seen(priority, now)
        if not queues.count:
            saturation = self.saturation()
            ranked, index = levels.current(now, queues.holds)
            ceiling = self._ceilings(saturation, ranked)[index[priority]]
            if saturation < ceiling and (
                not self._shares or self._admits(priority, request.fairness_id, saturation, ceiling)
            ):
                if recorder is not None:
                    recorder.outcome(request, DISPATCHED, 0.0)
                return None
        start = self._perf()
        size = request.body_size
        reason = queues.rejection(priority, size)
        if reason is not None:
            if recorder is not None:
                recorder.enqueued(request, REJECTED_CAPACITY, self._perf() - start)
                recorder.outcome(request, REJECTED_CAPACITY, 0.0)
            raise RequestError(429, RATE_LIMITED, f"flow control: request rejected: {reason}")
        ttl = self.config.default_ttl
        ticket = Ticket(request, asyncio.get_running_loop().create_future(), dispatch)
        deadline = now + ttl if ttl else math.inf
        ticket.item = queues.push(
            priority, request.fairness_id, size, now, deadline, ticket, request.request_id, request.headers
        )
        if recorder is not None:
            recorder.enqueued(request, DISPATCHED, self._perf() - start)
        self.kick()
        return ticket

    def _admits(self, priority: int, fairness_id: str, saturation: float, ceiling: float) -> bool:
        """The band's share-limited fairness policy's verdict on a fast-path request (True without one)."""
        admits = getattr(self.config.band(priority).fairness, "admits", None)  # cheaper than isinstance
        return admits is None or bool(admits(priority, fairness_id, saturation, ceiling))

    async def wait(self, ticket: Ticket) -> RequestError | None:
        """None once dispatched (the dispatch callback has run); the error to answer otherwise. A
        cancelled waiter (the stream was reset) takes its request out of the queues."""
        try:
            return await ticket.future
        except asyncio.CancelledError:
            self.cancel(ticket)
            raise

    def cancel(self, ticket: Ticket) -> None:
        """The client went away: take the request out if it is still queued (idempotent)."""
        item = ticket.item
        if item is not None and self.queues.remove(item):
            self._finish(ticket, EVICTED_CANCELLED, "flow control: client disconnected while queued")

    # -- dispatch

    def kick(self) -> None:
        """Run a dispatch pass soon (capacity may have freed up). Cheap when nothing is queued."""
        if self._kicked or not self.queues.count:
            return
        self._kicked = True
        asyncio.get_running_loop().call_soon(self._pass)

    def _tick(self) -> None:
        self._timer = None
        self.kick()

    def _pass(self) -> None:
        self._kicked = False
        if self.closed:
            return
        start = self._perf()
        queues = self.queues
        endpoints = self._snapshot()
        now = self._now()
        empty = not endpoints
        if empty != self._empty_pool:
            self._empty_pool, self._regime_since = empty, now
        config = self.config
        ttl = config.no_endpoint_ttl if empty else config.default_ttl
        for gone in queues.expired(now, ttl, self._regime_since):
            self._finish(
                gone.payload, EVICTED_TTL, f"flow control: request timed out in queue after {ttl:g}s (TTL)"
            )
        detector, ceilings, recorder, levels = self._detector, self._ceilings, self._recorder, self.levels
        for band in queues.bands():
            levels.seen(band.priority, now)  # a waiting band stays provisioned
        ranked, index = levels.current(now, queues.holds)
        while queues.count:
            saturation = 0.0 if detector is None else detector.saturation(endpoints, now)
            limits = ceilings(saturation, ranked)

            def gate(priority: int, s: float = saturation, limits: Sequence[float] = limits) -> bool:
                return s < limits[index[priority]]

            def ceiling(priority: int, limits: Sequence[float] = limits) -> float:
                return limits[index[priority]]

            item = queues.pop_next(gate, ceiling, saturation)
            if item is None:
                break
            ticket: Ticket = item.payload
            if recorder is not None:
                recorder.outcome(ticket.request, DISPATCHED, now - item.enqueued_at)
            try:
                ticket.dispatch()
            except Exception:  # the callback answers its own failures; never lose the others' work
                _log.exception("flow-control dispatch failed", request_id=ticket.request.request_id)
            if not ticket.future.done():
                ticket.future.set_result(None)
        if recorder is not None:
            recorder.cycle(self._perf() - start)
        if queues.count and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._poll, self._tick)

    def _finish(self, ticket: Ticket, outcome: str, message: str) -> None:
        item = ticket.item
        if self._recorder is not None and item is not None:
            self._recorder.outcome(ticket.request, outcome, max(0.0, self._now() - item.enqueued_at))
        if not ticket.future.done():
            status = 503
            ticket.future.set_result(RequestError(status, UNAVAILABLE, message))

    # -- lifecycle

    def close(self) -> None:
        """Shutdown: answer every queued request 503 and refuse new ones (idempotent)."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for item in list(self.queues.items()):
            if self.queues.remove(item):
                self._finish(
                    item.payload, EVICTED_OTHER, "flow control: the endpoint picker is shutting down"
                )
