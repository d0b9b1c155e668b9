"""The ext_proc servicer on grpc.aio: a thin loop around :class:`~epp.server.stream.ExtProcStream`.

Every message from the proxy goes to ``stream.feed``; its responses are written in order. The stream
ends as soon as the request is answered or its response is complete (one receive less per request
than waiting for the proxy's half-close; Envoy treats a stream the server closes with OK as
"processing complete"). The ``finally`` always calls ``stream.end(outcome)``, so ``on_completed``
fires exactly once per dispatch. Outcome of a stream that ends before its response completed:

* the proxy half-closed the stream (end of messages): ``CLIENT_CANCEL`` (the downstream request ended);
* the RPC was cancelled while the server shuts down: ``SHUTDOWN``;
* the RPC's deadline passed: ``TIMEOUT``; any other cancellation or transport error: ``STREAM_RESET``.

A protocol violation by the proxy ends the stream with ``INVALID_ARGUMENT`` (the proxy's failure mode
applies).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import structlog
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest

from epp.protocol import RemoteProtocolError
from epp.server.grpc_status import (
    GRPC_CANCELLED,
    GRPC_DEADLINE_EXCEEDED,
    GRPC_INVALID_ARGUMENT,
    GRPC_OK,
    GRPC_RESOURCE_EXHAUSTED,
)
from epp.server.stream import StreamCore
from scheduler.types import Outcome

__all__ = ["ExtProcServicer"]

_log = structlog.get_logger("epp.servicer")
_RESET_SETTLE_SECONDS = 0.05


class ExtProcServicer(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """``envoy.service.ext_proc.v3.ExternalProcessor/Process``."""

    def __init__(self, core: StreamCore, max_send_bytes: int = 0) -> None:
        """``max_send_bytes`` (``--grpc-max-send-msg-size``, 0: none): a larger answer ends the stream
        with RESOURCE_EXHAUSTED, checked here so the status and the stream metrics say so (gRPC's own
        limit, set too, would only fail the write)."""
        self.core = core
        self.shutting_down = False
        self.max_send_bytes = max_send_bytes

    @property
    def active_streams(self) -> int:
        return self.core.active_streams

    @property
    def completions(self) -> int:
        return self.core.completions

    async def Process(
        self, request_iterator: AsyncIterator[ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> None:
        stream = self.core.open()
        write = context.write
        outcome = Outcome.STREAM_RESET
        code = -1  # not sent: the stream's end decides (see ExtProcStream.end)
        limit = self.max_send_bytes
        try:
            async for msg in request_iterator:
                responses = stream.feed(msg)
                if stream.suspended:  # the async pre-scheduling step (token-producer's render)
                    for response in responses:
                        await write(response)
                    responses = await stream.settle()
                for response in responses:
                    if limit and (size := response.ByteSize()) > limit:
                        code = GRPC_RESOURCE_EXHAUSTED  # as grpc-go's send limit
                        message = f"trying to send message larger than max ({size} vs. {limit})"
                        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message)
                    await write(response)
                if stream.finished:
                    code = GRPC_OK
                    return
            # The messages ended: a half-close by the proxy, or a reset. grpc.aio ends the iterator on a
            # reset and injects CancelledError a moment later; give it that moment (only on this rare
            # path: a normal stream has completed its dispatch before it ends).
            if stream.dispatched:
                await asyncio.sleep(_RESET_SETTLE_SECONDS)
            outcome = Outcome.CLIENT_CANCEL
            code = GRPC_OK
        except asyncio.CancelledError:
            outcome = self._cancel_outcome(context)
            code = GRPC_DEADLINE_EXCEEDED if outcome is Outcome.TIMEOUT else GRPC_CANCELLED
            raise
        except RemoteProtocolError as exc:
            _log.warning("ext_proc protocol error", error=str(exc))
            code = GRPC_INVALID_ARGUMENT
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except grpc.aio.AioRpcError as exc:  # a write refused, e.g. over --grpc-max-send-msg-size
            code = exc.code().value[0]
            raise
        finally:
            stream.end(outcome, code)

    def _cancel_outcome(self, context: grpc.aio.ServicerContext) -> Outcome:
        if self.shutting_down:
            return Outcome.SHUTDOWN
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return Outcome.TIMEOUT
        return Outcome.STREAM_RESET
