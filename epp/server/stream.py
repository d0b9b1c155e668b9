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
answered inline by the router (its actions join the batch), ``Dispatched`` / ``ResponseStarted`` /
``ResponseChunk`` / ``Completed`` fire the scheduler's hooks and the metrics synchronously, ``Send``
responses are returned in order. Hook and metric failures are logged, never raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse

from epp.protocol import (
    Completed,
    Dispatched,
    ResponseChunk,
    ResponseStarted,
    Schedule,
    Send,
    Session,
    SessionConfig,
    State,
)
from epp.server.metrics import RequestMetrics
from epp.server.request_log import RequestLog
from epp.server.routing import Router
from scheduler.types import Completion, Outcome, SchedulingResult

__all__ = ["ExtProcStream", "StreamCore"]

_log = structlog.get_logger("epp.stream")
_FINISHED = frozenset({State.COMPLETE, State.CLOSED})


class StreamCore:
    """Shared by every stream of a server; counts open streams and completed dispatches."""

    def __init__(
        self,
        config: SessionConfig,
        router: Router,
        metrics: RequestMetrics,
        request_log: RequestLog | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config
        self.router = router
        self.scheduler = router.scheduler
        self.metrics = metrics
        self.request_log = request_log
        self.clock = clock
        self.active_streams = 0
        self.completions = 0

    def open(self) -> ExtProcStream:
        self.active_streams += 1
        return ExtProcStream(self)

    def hook(self, action: Dispatched | ResponseStarted | ResponseChunk) -> None:
        request, result = action.request, action.result
        try:
            if isinstance(action, ResponseChunk):
                self.scheduler.response_chunk(request, result, action.chunk)
            elif isinstance(action, Dispatched):
                self.metrics.dispatched(request.model, request.target_model)
                self.scheduler.dispatched(request, result)
            else:
                self.scheduler.response_headers(request, result, action.status, action.headers)
        except Exception:
            _log.exception(
                "lifecycle hook failed", request_id=request.request_id, action=type(action).__name__
            )

    def completed(self, action: Completed, seconds: float, response_bytes: int) -> None:
        request, result, completion = action.request, action.result, action.completion
        self.completions += 1
        try:
            self.metrics.completed(request.model, request.target_model, completion, seconds, response_bytes)
            self.scheduler.completed(request, result, completion)
        except Exception:
            _log.exception("completion hook failed", request_id=request.request_id)


class ExtProcStream:
    """The state of one stream (one HTTP request). Not thread-safe; drive it from one task."""

    __slots__ = (
        "_closed",
        "_core",
        "_response_bytes",
        "_start",
        "completion",
        "error",
        "result",
        "schedule_seconds",
        "session",
    )

    def __init__(self, core: StreamCore) -> None:
        self._core = core
        self.session = Session(core.config)
        self._start = core.clock()
        self._response_bytes = 0
        self._closed = False
        self.schedule_seconds = 0.0
        self.completion: Completion | None = None
        self.result: SchedulingResult | None = None
        self.error: str | None = None

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
        if msg.HasField("response_body"):
            self._response_bytes += len(msg.response_body.body)
        out: list[ProcessingResponse] = []
        actions = session.receive(msg)
        # The list may grow while it is walked: a Schedule appends the actions of its decision.
        for action in actions:
            if isinstance(action, Send):
                if session.state is State.CLOSED:
                    self._count_error(action.response)
                out.append(action.response)
            elif isinstance(action, Schedule):
                more, self.schedule_seconds = core.router.route(session, action)
                actions.extend(more)
            elif isinstance(action, Completed):
                self.completion = action.completion
                core.completed(action, core.clock() - self._start, self._response_bytes)
            else:
                if isinstance(action, Dispatched):
                    self.result = action.result
                core.hook(action)
        return out

    def end(self, outcome: Outcome) -> None:
        """The stream is over: complete an open dispatch with ``outcome``, log the request. Idempotent."""
        if self._closed:
            return
        self._closed = True
        core = self._core
        core.active_streams -= 1
        for action in self.session.abort(outcome):
            if isinstance(action, Completed):
                self.completion = action.completion
                core.completed(action, core.clock() - self._start, self._response_bytes)
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
        model, target = (request.model, request.target_model) if request is not None else ("", "")
        self.error = response.immediate_response.details or "unknown"
        self._core.metrics.failed(model, target, self.error)
