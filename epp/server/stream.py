"""One ext_proc stream, transport-free: ProcessingRequest in, ProcessingResponses out, hooks fired.

:class:`StreamCore` holds what every stream shares (session config, router, scheduler hooks, metrics,
request log); :meth:`StreamCore.open` makes an :class:`ExtProcStream` per stream. Both gRPC engines
(:mod:`epp.server.servicer` on grpc.aio, :mod:`epp.server.h2` on raw HTTP/2) drive it the same way::

    stream = core.open()
    try:
        for message in incoming:
            send_all(stream.feed(message))      # may raise RemoteProtocolError
            if stream.finished: break           # request answered or response complete
        outcome = ...                           # CLIENT_CANCEL / STREAM_RESET / TIMEOUT / SHUTDOWN
    finally:
        stream.end(outcome)                     # Completed exactly once if still dispatched

:meth:`ExtProcStream.feed` runs ``session.receive`` and every action in order: a ``Schedule`` is
answered inline by the router (its actions join the batch) — unless the configuration has an async
pre-scheduling step (``token-producer``'s vLLM render, :mod:`epp.server.render`) for the request: then
the walk stops there, :attr:`ExtProcStream.suspended` is true, and the engine awaits
:meth:`ExtProcStream.settle`, which runs the step, schedules and returns the rest of the batch's
responses (the engine feeds the stream nothing meanwhile). With flow control on
(:mod:`epp.flowcontrol`), a request the controller queues suspends the stream the same way: ``settle``
awaits its dispatch (the controller schedules it then, inside its dispatch pass) or its rejection
(TTL, shutdown), and a stream that ends while queued takes its request out of the queues.
``Dispatched`` / ``ResponseStarted`` / ``ResponseChunk`` / ``Completed`` fire the scheduler's hooks
and the metrics synchronously, ``Send`` responses are returned in order. Hook and metric failures
are logged, never raised.

Observer streams (``ProcessingRequest.observability_mode`` on the first message, the second ext_proc
filter of the ``observability`` Envoy variant) are driven by an
:class:`~epp.protocol.observer.ObserverSession` instead: never scheduled, never answered (Envoy ignores
answers in that mode, so nothing is sent). A routing stream whose response body mode is NONE registers
its request in :class:`~epp.server.awaiting.AwaitingUsage` at dispatch; the observer stream with the same
``x-request-id`` takes it when its response ends and records the response size and usage metrics
(tokens, NTPOT measured from the routing stream's start). The routing stream then records no response
size or usage, so nothing is counted twice.

Completion: exactly once per dispatch, as always. A routing stream that saw the response headers
completed there (``response_header_mode: SEND``); the observer then adds only usage metrics. A routing
stream that ends while still DISPATCHED (Envoy closes it right after routing when the response phase is
skipped, the shipped ``observability`` config) defers its completion to the observer, once this server
has seen an observer stream: the observer completes it with the real outcome (OK with usage, or the
upstream status) when the response ends, so in-flight accounting lasts until then; if the observer
stream is cut off, or never comes within the entry's TTL, it completes with the routing stream's own
outcome. At shutdown nothing is deferred.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse

from epp.flowcontrol.controller import FlowController, Ticket
from epp.protocol import (
    Action,
    Completed,
    Dispatched,
    Observed,
    ObserverSession,
    ResponseChunk,
    ResponseStarted,
    Schedule,
    Send,
    Session,
    SessionConfig,
    State,
)
from epp.protocol.session import DEFAULT_FAIRNESS_ID
from epp.request.errors import RequestError
from epp.server.awaiting import AwaitingUsage
from epp.server.metrics import RequestMetrics, StreamMetrics, error_code
from epp.server.render import TokenRenderer
from epp.server.request_log import RequestLog
from epp.server.routing import Router
from scheduler.types import Completion, Outcome, SchedulingResult

__all__ = ["ExtProcStream", "StreamCore"]

_log = structlog.get_logger("epp.stream")
_FINISHED = frozenset({State.COMPLETE, State.CLOSED})
_HEADERS, _DISPATCHED, _CLOSED = State.HEADERS, State.DISPATCHED, State.CLOSED  # globals are cheaper
_RESPONDING = State.RESPONDING
# gRPC status of a stream that ends before it finished, by outcome (as grpc-go classifies the Go EPP's
# return: EOF -> OK, a cancelled context -> Canceled, a passed deadline -> DeadlineExceeded).
_STREAM_STATUS = {Outcome.CLIENT_CANCEL: 0, Outcome.OK: 0, Outcome.STREAM_RESET: 1, Outcome.SHUTDOWN: 1,
                  Outcome.TIMEOUT: 4}  # fmt: skip


class StreamCore:
    """Shared by every stream of a server; counts open streams and completed dispatches."""

    def __init__(
        self,
        config: SessionConfig,
        router: Router,
        metrics: RequestMetrics,
        request_log: RequestLog | None = None,
        clock: Callable[[], float] = time.perf_counter,
        awaiting: AwaitingUsage | None = None,
        stream_metrics: StreamMetrics | None = None,
        renderer: TokenRenderer | None = None,
        flow: FlowController | None = None,
    ) -> None:
        """``stream_metrics``: the opt-in ext_proc stream metrics (None: not recorded). ``renderer``: the
        async pre-scheduling step (None: requests are scheduled as soon as they are parsed). ``flow``:
        the flow controller (None: flow control off; requests are scheduled at once)."""
        self.config = config
        self.renderer = renderer
        self.flow = flow
        self.stream_metrics = stream_metrics
        self.router = router
        self.scheduler = router.scheduler
        self.metrics = metrics
        self.request_log = request_log
        self.clock = clock
        self.awaiting = awaiting if awaiting is not None else AwaitingUsage(clock=clock)
        self.active_streams = 0
        self.completions = 0
        self.observations = 0  # observer reports matched to a routed request
        self.observers_seen = False  # set by the first observer stream: deferral is worth it
        self.unmatched_observations = 0  # observer reports with no awaiting request

    def open(self) -> ExtProcStream:
        self.active_streams += 1
        if self.stream_metrics is not None:
            self.stream_metrics.started()
        return ExtProcStream(self)

    def hook(self, action: Dispatched | ResponseStarted | ResponseChunk) -> None:
        request, result = action.request, action.result
        try:
            if isinstance(action, ResponseChunk):
                self.scheduler.response_chunk(request, result, action.chunk)
            elif isinstance(action, Dispatched):
                m = self.metrics
                m.dispatched(
                    m.bound(request.model, request.target_model, request.fairness_id, request.priority)
                )
                self.scheduler.dispatched(request, result)
            else:
                self.scheduler.response_headers(request, result, action.status, action.headers)
        except Exception:
            _log.exception(
                "lifecycle hook failed", request_id=request.request_id, action=type(action).__name__
            )

    def observed(self, action: Observed) -> None:
        """An observer stream's response ended: record its usage against the awaiting request."""
        entry = self.awaiting.take(action.request_id)
        if entry is None:
            self.unmatched_observations += 1
            _log.debug("observed response of no awaiting request", request_id=action.request_id)
            return
        self.observations += 1
        awaited, finish = entry
        if finish is not None:  # the routing stream deferred its completion to us
            finish(action)
            return
        if not action.complete or not 200 <= action.status < 300:
            return  # the routing stream's completion already counts the failure
        try:
            seconds = self.clock() - awaited.started
            m = self.metrics
            labels = m.bound(awaited.model, awaited.target_model, awaited.fairness_id, awaited.priority)
            m.observed(labels, action.usage, seconds, action.response_bytes)
        except Exception:
            _log.exception("usage metrics failed", request_id=action.request_id)

    def completed(
        self,
        action: Completed,
        seconds: float,
        response_bytes: int | None,
        ttft: float = 0.0,
        streaming: bool = False,
    ) -> None:
        """A dispatch completed; ``ttft`` (0 = unknown), ``streaming``: see ``RequestMetrics.completed``."""
        request, result, completion = action.request, action.result, action.completion
        self.completions += 1
        try:
            m = self.metrics
            labels = m.bound(request.model, request.target_model, request.fairness_id, request.priority)
            m.completed(labels, completion, seconds, response_bytes, ttft, streaming)
            self.scheduler.completed(request, result, completion)
        except Exception:
            _log.exception("completion hook failed", request_id=request.request_id)
        if self.flow is not None:
            self.flow.kick()  # capacity freed up: queued requests may go


class ExtProcStream:
    """The state of one stream (one HTTP request). Not thread-safe; drive it from one task."""

    __slots__ = (
        "_busy",
        "_closed",
        "_core",
        "_held",
        "_labels",
        "_last_chunk",
        "_released",
        "_rendered",
        "_resp_at",
        "_start",
        "_streaming",
        "_ticket",
        "_ttft",
        "completion",
        "error",
        "observer",
        "result",
        "schedule_seconds",
        "session",
    )

    def __init__(self, core: StreamCore) -> None:
        self._core = core
        self.session = Session(core.config)
        self._start = core.clock()
        self._closed = False
        self._ttft = 0.0  # seconds from receipt to the first response body message (0: none yet)
        self._last_chunk = 0.0  # clock of the last response body message
        self._resp_at = 0.0  # clock of the response headers
        self._busy = 0.0  # seconds spent handling response messages
        self._streaming = False  # the response is SSE
        self._labels: Any = None  # the request's metric label children, bound on first inter-chunk time
        self.schedule_seconds = 0.0
        self.completion: Completion | None = None
        self.result: SchedulingResult | None = None
        self.error: str | None = None
        self.observer: ObserverSession | None = None
        self._held: tuple[list[Action], int] | None = None  # actions and index of a waiting Schedule
        self._ticket: Ticket | None = None  # the held request waits in flow control
        self._rendered = False  # the pre-scheduling step ran
        self._released: list[ProcessingResponse] = []  # responses of a flow-control dispatch

    @property
    def finished(self) -> bool:
        """Nothing more will be sent: the request was answered, or its response completed."""
        if self.observer is not None:
            return self.observer.finished
        return self.session.state in _FINISHED

    @property
    def dispatched(self) -> bool:
        return self.session.dispatched

    def feed(self, msg: ProcessingRequest) -> list[ProcessingResponse]:
        """The responses to send for ``msg``, in order. Raises RemoteProtocolError."""
        core = self._core
        session = self.session
        if self.observer is not None or (session.state is _HEADERS and msg.observability_mode):
            return self._observe(msg)
        out: list[ProcessingResponse] = []
        state = session.state
        responding = state is _DISPATCHED or state is _RESPONDING
        t0 = 0.0
        if responding:
            t0 = core.clock()
            if self._resp_at == 0.0:
                self._resp_at = t0
            if msg.HasField("response_body") and msg.response_body.body:  # non-empty chunks, as upstream
                self._response_chunk(t0)
        actions = session.receive(msg)
        self._walk(actions, 0, out, responding, t0)
        if responding:
            self._busy += core.clock() - t0
        return out

    @property
    def suspended(self) -> bool:
        """A request waits for the async pre-scheduling step or in flow control: the engine must
        ``await settle()`` before it feeds this stream again."""
        return self._held is not None

    async def settle(self) -> list[ProcessingResponse]:
        """Run the held request's waits — the pre-scheduling step, then flow control — and schedule it;
        the responses to send. Nothing is scheduled if the stream ended meanwhile (a reset or shutdown
        while waiting); a cancelled wait takes the request out of the flow-control queues."""
        out: list[ProcessingResponse] = []
        core = self._core
        while self._held is not None:
            actions, i = self._held
            ticket = self._ticket
            if ticket is None:  # the pre-scheduling step
                schedule = actions[i]
                assert isinstance(schedule, Schedule) and core.renderer is not None
                try:
                    await core.renderer.render(schedule.request, schedule.body)
                finally:
                    self._held = None
                    self._rendered = True
                if not self._closed:
                    self._walk(actions, i, out, False, 0.0)  # from the Schedule: flow control may hold it
                continue
            assert core.flow is not None
            try:
                error = await core.flow.wait(ticket)
            finally:
                self._held = self._ticket = None
            if error is None:  # dispatched: the callback scheduled it and walked on
                out.extend(self._released)
                self._released = []
            elif not self._closed:
                actions.extend(self.session.reject(error.status, error.error_type, error.message))
                self._walk(actions, i + 1, out, False, 0.0)
        return out

    def _release(self, actions: list[Action], i: int) -> None:
        """Flow control dispatched the held request (called inside its dispatch pass): schedule it on the
        endpoints as they are now and run the rest of the batch; :meth:`settle` sends the responses."""
        schedule = actions[i]
        assert isinstance(schedule, Schedule)
        router = self._core.router
        more, self.schedule_seconds = router.route(self.session, schedule, counted=True)
        actions.extend(more)
        self._walk(actions, i + 1, self._released, False, 0.0)

    def _queue(self, actions: list[Action], i: int, action: Schedule) -> bool:
        """Flow control's admission for ``actions[i]``; False when the request waits (held)."""
        core = self._core
        flow = core.flow
        assert flow is not None
        rejected = core.router.precheck(self.session, action)
        if rejected is None:
            try:
                ticket = flow.offer(action.request, partial(self._release, actions, i))
            except RequestError as exc:
                rejected = self.session.reject(exc.status, exc.error_type, exc.message)
            else:
                if ticket is None:  # the fast path: schedule now
                    more, self.schedule_seconds = core.router.route(self.session, action, counted=True)
                    actions.extend(more)
                    return True
                self._ticket = ticket
                self._held = (actions, i)
                return False
        actions.extend(rejected)
        return True

    def _walk(
        self, actions: list[Action], i: int, out: list[ProcessingResponse], responding: bool, t0: float
    ) -> None:
        """Run ``actions[i:]`` in order; stops at a ``Schedule`` that waits for the pre-scheduling step."""
        core = self._core
        session = self.session
        # The list may grow while it is walked: a Schedule appends the actions of its decision.
        while i < len(actions):
            action = actions[i]
            i += 1
            if isinstance(action, Send):
                if session.state is _CLOSED:
                    self._count_error(action.response)
                out.append(action.response)
            elif isinstance(action, Schedule):
                renderer = core.renderer
                if action.header_only:
                    more, self.schedule_seconds = core.router.route(session, action)
                    actions.extend(more)
                elif renderer is not None and not self._rendered and renderer.wants(action.request):
                    self._held = (actions, i - 1)
                    return
                elif core.flow is not None:
                    if not self._queue(actions, i - 1, action):
                        return
                else:
                    more, self.schedule_seconds = core.router.route(session, action)
                    actions.extend(more)
            elif isinstance(action, Completed):
                self.completion = action.completion
                now = core.clock()
                core.completed(action, now - self._start, self._body_bytes(), self._ttft, self._streaming)
                if responding:
                    busy = self._busy + now - t0 if self._streaming else now - self._resp_at
                    core.metrics.response_processing.observe(busy)
            else:
                if isinstance(action, Dispatched):
                    self.result = action.result
                    request = action.request
                    core.metrics.request_processing.observe(core.clock() - self._start)
                    if not session.sees_response_body:
                        core.awaiting.expect(
                            request.request_id,
                            request.model,
                            request.target_model,
                            self._start,
                            request.fairness_id,
                            request.priority,
                        )
                elif isinstance(action, ResponseStarted):
                    self._streaming = action.streaming
                core.hook(action)

    def _response_chunk(self, now: float) -> None:
        """A non-empty response body message arrived at ``now``: time to first byte, inter-chunk latency."""
        if self._ttft == 0.0:
            self._ttft = now - self._start
        elif self._streaming:
            labels = self._labels
            if labels is None:
                request = self.session.request
                if request is None:
                    return
                m = self._core.metrics
                labels = self._labels = m.bound(
                    request.model, request.target_model, request.fairness_id, request.priority
                )
            labels.itl.observe(now - self._last_chunk)
        self._last_chunk = now

    def _observe(self, msg: ProcessingRequest) -> list[ProcessingResponse]:
        """An observer stream's message: report a finished response; nothing is ever answered."""
        observer = self.observer
        if observer is None:
            observer = self.observer = ObserverSession(self._core.config.usage_capture_bytes)
            self._core.observers_seen = True
        for action in observer.receive(msg):
            self._core.observed(action)
        return []

    def _body_bytes(self) -> int | None:
        session = self.session
        return session.response_bytes if session.sees_response_body else None

    def end(self, outcome: Outcome, status: int = -1) -> None:
        """The stream is over: complete an open dispatch with ``outcome``, log the request. Idempotent.

        ``status``: the gRPC status the engine closes the stream with (-1: not sent; then OK for a stream
        that finished or that the proxy half-closed, CANCELLED for a reset or shutdown,
        DEADLINE_EXCEEDED for a timeout), for the opt-in stream metrics.
        """
        if self._closed:
            return
        self._closed = True
        core = self._core
        core.active_streams -= 1
        ticket = self._ticket
        if ticket is not None and core.flow is not None:  # gone while queued (h2: the reset comes here)
            core.flow.cancel(ticket)
        if core.stream_metrics is not None:
            if status < 0:
                status = 0 if self.finished else _STREAM_STATUS.get(outcome, 2)
            core.stream_metrics.finished(status, core.clock() - self._start)
        observer = self.observer
        if observer is not None:
            if not observer.finished:  # cut off: a deferred completion ends with its own outcome
                found = core.awaiting.take(observer.request_id) if observer.request_id else None
                if found is not None and found[1] is not None:
                    found[1](None)
            observer.abort()
            return
        session = self.session
        if (
            core.observers_seen
            and outcome is not Outcome.SHUTDOWN
            and session.state is _DISPATCHED
            and not session.sees_response_body
            and session.request is not None
            and core.awaiting.defer(session.request.request_id, partial(self._finish_deferred, outcome))
        ):
            return
        self._complete(session.abort(outcome), self._body_bytes())

    def _finish_deferred(self, outcome: Outcome, observed: Observed | None) -> None:
        """The deferred completion: from the observer's report, or with ``outcome`` when none came."""
        if observed is None:
            self._complete(self.session.abort(outcome), None)
        else:
            actions = self.session.observed_end(observed.status, observed.usage, observed.complete)
            self._complete(actions, observed.response_bytes)

    def _complete(self, actions: list[Action], response_bytes: int | None) -> None:
        core = self._core
        for action in actions:
            if isinstance(action, Completed):
                self.completion = action.completion
                core.completed(action, core.clock() - self._start, response_bytes)
        if core.request_log is not None:
            core.request_log.stream_ended(
                self.session.request,
                self.result,
                self.error,
                self.schedule_seconds,
                self.completion,
                core.clock() - self._start,
            )

    def _count_error(self, response: ProcessingResponse) -> None:
        """Count an HTTP error answered by the picker (an ImmediateResponse)."""
        if not response.HasField("immediate_response"):
            return
        request = self.session.request
        m = self._core.metrics
        if request is not None:
            labels = m.bound(request.model, request.target_model, request.fairness_id, request.priority)
        else:
            labels = m.bound("", "", DEFAULT_FAIRNESS_ID, 0)  # upstream's labels of an unparsed request
        immediate = response.immediate_response
        self.error = immediate.details or "unknown"
        m.failed(labels, error_code(immediate.status.code))
        if self.result is None:  # answered before dispatch: its request processing ends here
            m.request_processing.observe(self._core.clock() - self._start)
