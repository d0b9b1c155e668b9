"""Routing streams: one ext_proc stream that routes one HTTP request (the :class:`~epp.server.stream.
ExtProcStream` of a stream whose first message is not in observability mode).

:meth:`RoutingStream.feed` runs ``session.receive`` and every action in order: a ``Schedule`` is
answered inline by the router (its actions join the batch) — unless the configuration has an async
pre-scheduling step (``token-producer``'s vLLM render, :mod:`epp.server.render`) for the request: then
the walk stops there, :attr:`RoutingStream.suspended` is true, and the engine awaits
:meth:`RoutingStream.settle`, which runs the step, schedules and returns the rest of the batch's
responses (the engine feeds the stream nothing meanwhile). With flow control on
(:mod:`epp.flowcontrol`), a request the controller queues suspends the stream the same way: ``settle``
awaits its dispatch (the controller schedules it then, inside its dispatch pass) or its rejection
(TTL, shutdown), and a stream that ends while queued takes its request out of the queues.
``Dispatched`` / ``ResponseStarted`` / ``ResponseChunk`` / ``Completed`` fire the scheduler's hooks
and the metrics synchronously, ``Send`` responses are returned in order. Hook and metric failures
are logged, never raised.

A stream whose response body mode is NONE does not see its response body: at dispatch it tells the
server's :class:`~epp.server.correlation.UsageCorrelation`, which may take over its completion when the
stream ends while still dispatched (the ``observability`` Envoy variant; see that module).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse

from epp.flowcontrol.controller import Ticket
from epp.protocol import (
    Action,
    Completed,
    Dispatched,
    ResponseStarted,
    Schedule,
    Send,
    Session,
    State,
)
from epp.request.errors import RequestError
from epp.server.metrics import error_code
from scheduler.types import DEFAULT_FAIRNESS_ID, Completion, Outcome, SchedulingResult

if TYPE_CHECKING:
    from epp.server.stream import StreamCore

__all__ = ["RoutingStream"]

_FINISHED = frozenset({State.COMPLETE, State.CLOSED})
_DISPATCHED, _CLOSED = State.DISPATCHED, State.CLOSED  # globals are cheaper
_RESPONDING = State.RESPONDING


class RoutingStream:
    """The state of one routing stream (one HTTP request). Not thread-safe; drive it from one task."""

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
        "result",
        "schedule_seconds",
        "session",
    )

    def __init__(self, core: StreamCore, start: float) -> None:
        """``start``: when the stream opened, on the core's clock."""
        self._core = core
        self.session = Session(core.config)
        self._start = start
        self._closed = False  # the stream ended: a wait that completes afterwards schedules nothing
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
        self._held: tuple[list[Action], int] | None = None  # actions and index of a waiting Schedule
        self._ticket: Ticket | None = None  # the held request waits in flow control
        self._rendered = False  # the pre-scheduling step ran
        self._released: list[ProcessingResponse] = []  # responses of a flow-control dispatch

    @property
    def finished(self) -> bool:
        """Nothing more will be sent: the request was answered, or its response completed."""
        return self.session.state in _FINISHED

    @property
    def dispatched(self) -> bool:
        return self.session.dispatched

    def feed(self, msg: ProcessingRequest) -> list[ProcessingResponse]:
        """The responses to send for ``msg``, in order. Raises RemoteProtocolError."""
        core = self._core
        session = self.session
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
                    if not session.sees_response_body:  # an observability stream may see it
                        core.correlation.expect(request, self._start)
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

    def _body_bytes(self) -> int | None:
        session = self.session
        return session.response_bytes if session.sees_response_body else None

    def end(self, outcome: Outcome) -> None:
        """The stream is over (called once): complete an open dispatch with ``outcome`` — or hand that over
        to the observability stream of its request (:meth:`UsageCorrelation.defer`) — and log the request."""
        self._closed = True
        core = self._core
        ticket = self._ticket
        if ticket is not None and core.flow is not None:  # gone while queued (h2: the reset comes here)
            core.flow.cancel(ticket)
        if core.correlation.defer(self.session, outcome, self._complete):
            return
        self._complete(self.session.abort(outcome), self._body_bytes())

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
