"""One ext_proc stream, transport-free: ProcessingRequest in, ProcessingResponses out, hooks fired.

:class:`StreamCore` holds what every stream shares (session config, router, scheduler hooks, metrics,
request log, the :class:`~epp.server.correlation.UsageCorrelation`); :meth:`StreamCore.open` makes an
:class:`ExtProcStream` per stream. Both gRPC engines (:mod:`epp.server.servicer` on grpc.aio,
:mod:`epp.server.h2` on raw HTTP/2) drive it the same way::

    stream = core.open()
    try:
        for message in incoming:
            send_all(stream.feed(message))      # may raise RemoteProtocolError
            if stream.suspended:                # an async step: feed nothing until it settles
                send_all(await stream.settle())
            if stream.finished: break           # request answered or response complete
        outcome = ...                           # CLIENT_CANCEL / STREAM_RESET / TIMEOUT / SHUTDOWN
    finally:
        stream.end(outcome)                     # Completed exactly once if still dispatched

A stream is one of two kinds, chosen on its first message (:class:`StreamKind`):

* :class:`~epp.server.routing_stream.RoutingStream`: routes one HTTP request (the normal case);
* :class:`~epp.server.observability_stream.ObservabilityStream`: the first message has
  ``ProcessingRequest.observability_mode`` (the second ext_proc filter of the ``observability`` Envoy
  variant): never scheduled, never answered; it reports the response's usage to the routing stream of
  the same ``x-request-id`` through :mod:`epp.server.correlation`, which owns that link and the
  deferred completion it allows.

:class:`ExtProcStream` itself keeps what is common: the open-stream count and the opt-in stream metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import structlog
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse

from epp.flowcontrol.controller import FlowController
from epp.protocol import (
    Completed,
    Dispatched,
    ResponseChunk,
    ResponseStarted,
    SessionConfig,
    is_observability_stream,
)
from epp.server.correlation import UsageCorrelation
from epp.server.grpc_status import GRPC_CANCELLED, GRPC_DEADLINE_EXCEEDED, GRPC_OK, GRPC_UNKNOWN
from epp.server.metrics import RequestMetrics, StreamMetrics
from epp.server.observability_stream import ObservabilityStream
from epp.server.prescheduling import PreSchedulingStep
from epp.server.request_log import RequestLog
from epp.server.routing import Router
from epp.server.routing_stream import RoutingStream
from scheduler.types import Outcome

__all__ = ["ExtProcStream", "StreamCore", "StreamKind"]

_log = structlog.get_logger("epp.stream")
# The gRPC status of a stream that ends before it finished, by outcome (as grpc-go classifies the Go
# EPP's return: EOF -> OK, a cancelled context -> Canceled, a passed deadline -> DeadlineExceeded;
# anything else Unknown).
_STREAM_STATUS = {Outcome.CLIENT_CANCEL: GRPC_OK, Outcome.OK: GRPC_OK, Outcome.STREAM_RESET: GRPC_CANCELLED,
                  Outcome.SHUTDOWN: GRPC_CANCELLED, Outcome.TIMEOUT: GRPC_DEADLINE_EXCEEDED}  # fmt: skip


class StreamKind(Protocol):
    """What a stream is once its first message arrived; :class:`ExtProcStream` forwards to it."""

    @property
    def finished(self) -> bool:
        """Nothing more will be sent on the stream."""

    @property
    def dispatched(self) -> bool:
        """A routed request is in flight (dispatched, its completion not yet reported)."""

    @property
    def suspended(self) -> bool:
        """The engine must ``await settle()`` before it feeds the stream again."""

    def feed(self, msg: ProcessingRequest) -> list[ProcessingResponse]:
        """The responses to send for ``msg``, in order. Raises RemoteProtocolError."""

    async def settle(self) -> list[ProcessingResponse]:
        """Run what the stream waits for; the responses to send."""

    def end(self, outcome: Outcome) -> None:
        """The stream is over; called exactly once."""


class StreamCore:
    """Shared by every stream of a server; counts open streams and completed dispatches."""

    def __init__(
        self,
        config: SessionConfig,
        router: Router,
        metrics: RequestMetrics,
        request_log: RequestLog | None = None,
        clock: Callable[[], float] = time.perf_counter,
        correlation: UsageCorrelation | None = None,
        stream_metrics: StreamMetrics | None = None,
        renderer: PreSchedulingStep | None = None,
        flow: FlowController | None = None,
    ) -> None:
        """``stream_metrics``: the opt-in ext_proc stream metrics (None: not recorded). ``renderer``: the
        async pre-scheduling step (None: requests are scheduled as soon as they are parsed). ``flow``:
        the flow controller (None: flow control off; requests are scheduled at once). ``correlation``:
        links routing and observability streams (default: one over ``metrics`` and ``clock``)."""
        self.config = config
        self.renderer = renderer
        self.flow = flow
        self.stream_metrics = stream_metrics
        self.router = router
        self.scheduler = router.scheduler
        self.metrics = metrics
        self.request_log = request_log
        self.clock = clock
        self.correlation = correlation if correlation is not None else UsageCorrelation(metrics, clock)
        self.active_streams = 0
        self.completions = 0

    def open(self) -> ExtProcStream:
        """A new stream (its kind is chosen by its first message)."""
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
    """One ext_proc stream as the engines drive it: its kind is chosen by the first message fed.
    Not thread-safe; drive it from one task."""

    __slots__ = ("_closed", "_core", "_start", "kind")

    def __init__(self, core: StreamCore) -> None:
        self._core = core
        self._start = core.clock()
        self._closed = False
        self.kind: StreamKind | None = None  # set by the first message

    @property
    def finished(self) -> bool:
        """Nothing more will be sent: the request was answered, its response completed, or (an
        observability stream) the response ended."""
        kind = self.kind
        return kind is not None and kind.finished

    @property
    def dispatched(self) -> bool:
        kind = self.kind
        return kind is not None and kind.dispatched

    @property
    def suspended(self) -> bool:
        """A request waits for the async pre-scheduling step or in flow control: the engine must
        ``await settle()`` before it feeds this stream again."""
        kind = self.kind
        return kind is not None and kind.suspended

    def feed(self, msg: ProcessingRequest) -> list[ProcessingResponse]:
        """The responses to send for ``msg``, in order. Raises RemoteProtocolError."""
        kind = self.kind
        if kind is None:
            core = self._core
            if is_observability_stream(msg):
                kind = self.kind = ObservabilityStream(core)
            else:
                kind = self.kind = RoutingStream(core, self._start)
        return kind.feed(msg)

    async def settle(self) -> list[ProcessingResponse]:
        """Run the held request's waits and schedule it; the responses to send (see
        :meth:`RoutingStream.settle`)."""
        kind = self.kind
        return [] if kind is None else await kind.settle()

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
        if core.stream_metrics is not None:
            if status < 0:
                status = GRPC_OK if self.finished else _STREAM_STATUS.get(outcome, GRPC_UNKNOWN)
            core.stream_metrics.finished(status, core.clock() - self._start)
        kind = self.kind
        if kind is not None:
            kind.end(outcome)
