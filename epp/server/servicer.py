"""The ext_proc gRPC servicer: a thin asyncio loop around the sans-I/O :class:`~epp.protocol.Session`.

For every message from the proxy: ``session.receive(msg)``, then each action in order: ``Send`` ->
write it; ``Schedule`` -> :meth:`Router.route` inline (its actions are appended to the batch);
``Dispatched`` / ``ResponseStarted`` / ``ResponseChunk`` / ``Completed`` -> fire the scheduler's hook
and record metrics, synchronously (no task per hook).

The ``finally`` always calls ``session.abort(outcome)``, so ``on_completed`` fires exactly once per
dispatch on every path. Outcome of a stream that ends before its response completed:

* the proxy half-closed the stream (end of messages): ``CLIENT_CANCEL`` (the downstream request ended);
* the RPC was cancelled while the server shuts down: ``SHUTDOWN``;
* the RPC's deadline passed: ``TIMEOUT``; any other cancellation or transport error: ``STREAM_RESET``.

A protocol violation by the proxy ends the stream with ``INVALID_ARGUMENT`` (the proxy's failure mode
applies). Errors in hooks or metrics are logged and never reach the stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import grpc
import structlog
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest

from epp.protocol import (
    Completed,
    Dispatched,
    RemoteProtocolError,
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

__all__ = ["ExtProcServicer"]

_log = structlog.get_logger("epp.servicer")
_RESET_SETTLE_SECONDS = 0.05
_FINISHED = frozenset({State.COMPLETE, State.CLOSED})


class ExtProcServicer(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """``envoy.service.ext_proc.v3.ExternalProcessor/Process``."""

    def __init__(
        self,
        config: SessionConfig,
        router: Router,
        metrics: RequestMetrics,
        request_log: RequestLog | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._config = config
        self._router = router
        self._scheduler = router.scheduler
        self._metrics = metrics
        self._request_log = request_log
        self._clock = clock
        self.shutting_down = False
        self.active_streams = 0
        self.completions = 0  # dispatches completed (any outcome), for tests and debugging

    async def Process(
        self, request_iterator: AsyncIterator[ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> None:
        session = Session(self._config)
        write = context.write
        route = self._router.route
        start = self._clock()
        schedule_seconds = 0.0
        response_bytes = 0
        outcome = Outcome.STREAM_RESET
        completion: Completion | None = None
        result: SchedulingResult | None = None
        error: str | None = None
        self.active_streams += 1
        try:
            async for msg in request_iterator:
                if msg.HasField("response_body"):
                    response_bytes += len(msg.response_body.body)
                actions = session.receive(msg)
                # The list may grow while it is walked: a Schedule appends the actions of its decision.
                for action in actions:
                    if isinstance(action, Send):
                        if session.state is State.CLOSED:
                            error = self._count_error(session, action) or error
                        await write(action.response)
                    elif isinstance(action, Schedule):
                        more, schedule_seconds = route(session, action)
                        actions.extend(more)
                    elif isinstance(action, Completed):
                        completion = action.completion
                        self._completed(action, self._clock() - start, response_bytes)
                    else:
                        if isinstance(action, Dispatched):
                            result = action.result
                        self._hook(action)
                if session.state in _FINISHED:
                    # Nothing more to do on this stream: end it now rather than wait for the proxy's
                    # half-close (one receive less per request). Envoy treats a stream the server closes
                    # with OK as "processing complete" and skips the rest of the request's phases.
                    return
            # The messages ended: a half-close by the proxy, or a reset. grpc.aio ends the iterator on a
            # reset and injects CancelledError a moment later; give it that moment (only on this rare
            # path: a normal stream has completed its dispatch before the proxy half-closes).
            if session.dispatched:
                await asyncio.sleep(_RESET_SETTLE_SECONDS)
            outcome = Outcome.CLIENT_CANCEL
        except asyncio.CancelledError:
            outcome = self._cancel_outcome(context)
            raise
        except RemoteProtocolError as exc:
            _log.warning("ext_proc protocol error", error=str(exc))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            self.active_streams -= 1
            for action in session.abort(outcome):
                if isinstance(action, Completed):
                    completion = action.completion
                    self._completed(action, self._clock() - start, response_bytes)
            if self._request_log is not None:
                self._request_log.stream_ended(
                    session.request, result, error, schedule_seconds, completion, self._clock() - start
                )

    def _cancel_outcome(self, context: grpc.aio.ServicerContext) -> Outcome:
        if self.shutting_down:
            return Outcome.SHUTDOWN
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return Outcome.TIMEOUT
        return Outcome.STREAM_RESET

    def _hook(self, action: Dispatched | ResponseStarted | ResponseChunk) -> None:
        request, result = action.request, action.result
        try:
            if isinstance(action, ResponseChunk):
                self._scheduler.response_chunk(request, result, action.chunk)
            elif isinstance(action, Dispatched):
                self._metrics.dispatched(request.model, request.target_model)
                self._scheduler.dispatched(request, result)
            else:
                self._scheduler.response_headers(request, result, action.status, action.headers)
        except Exception:
            _log.exception(
                "lifecycle hook failed", request_id=request.request_id, action=type(action).__name__
            )

    def _completed(self, action: Completed, seconds: float, response_bytes: int) -> None:
        request, result, completion = action.request, action.result, action.completion
        self.completions += 1
        try:
            self._metrics.completed(request.model, request.target_model, completion, seconds, response_bytes)
            self._scheduler.completed(request, result, completion)
        except Exception:
            _log.exception("completion hook failed", request_id=request.request_id)

    def _count_error(self, session: Session, action: Send) -> str | None:
        """Count an HTTP error answered by the picker; returns its error type (None for other sends)."""
        response = action.response
        if not response.HasField("immediate_response"):
            return None
        request = session.request
        model, target = (request.model, request.target_model) if request is not None else ("", "")
        error = response.immediate_response.details or "unknown"
        self._metrics.failed(model, target, error)
        return error
