"""Observability streams (sans-I/O): an ext_proc stream in ``observability_mode`` made one usage report.

Envoy's ext_proc filter with ``observability_mode: true`` sends the messages of its processing mode
without waiting for answers and ignores any it gets, and it sets ``ProcessingRequest.observability_mode``
on every message. The picker uses such a stream only to account usage off the critical path (the
``observability`` Envoy variant): it is never scheduled and never answered.
:func:`is_observability_stream` tells the I/O loop, from a stream's first message, to drive an
:class:`ObservabilitySession` instead of a :class:`~epp.protocol.session.Session`. (Not to be confused
with the scheduler's observer seam, :mod:`scheduler.observer`.)

States and the messages each accepts (anything else raises RemoteProtocolError)::

    REQUEST   --request_headers-->   REQUEST (the x-request-id is read; only as the first message)
    REQUEST   --request_body / request_trailers--> REQUEST (ignored)
    REQUEST   --response_headers-->  RESPONSE | DONE (end_of_stream)
    RESPONSE  --response_body-->     RESPONSE | DONE (end_of_stream)
    RESPONSE  --response_trailers--> DONE
    any       --abort()-->           DONE (nothing reported)

Reaching DONE through a message returns one :class:`~epp.protocol.actions.Observed`. Usage is read by
the same :class:`~epp.protocol.response.ResponseState` as the routing session's (SSE ``include_usage``
or ``continuous_usage_stats``, JSON bodies, Responses API); nothing is rewritten or held. A response
that is cut off (the stream ends before its end) reports nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest

from epp.protocol.actions import Observed
from epp.protocol.errors import RemoteProtocolError
from epp.protocol.headers import CONTENT_TYPE, REQUEST_ID_HEADER, read_headers
from epp.protocol.response import ResponseState
from scheduler.types import Usage

__all__ = ["ObservabilitySession", "ObservabilityState", "is_observability_stream"]


def is_observability_stream(msg: ProcessingRequest) -> bool:
    """True when ``msg`` (a stream's first message) comes from an ext_proc filter in observability mode."""
    return bool(msg.observability_mode)


class ObservabilityState(enum.Enum):
    REQUEST = "request"
    RESPONSE = "response"
    DONE = "done"


class ObservabilitySession:
    """State of one observability stream. Not thread-safe; drive it from one task."""

    __slots__ = ("_capture", "_messages", "_response", "_response_bytes", "request_id", "state")

    def __init__(self, usage_capture_bytes: int) -> None:
        """``usage_capture_bytes`` bounds the copy of a non-streamed body kept to read its usage."""
        self._capture = usage_capture_bytes
        self._messages = 0
        self._response: ResponseState | None = None
        self._response_bytes = 0
        self.request_id = ""
        self.state = ObservabilityState.REQUEST

    @property
    def finished(self) -> bool:
        """True once the response ended (or the stream was aborted): nothing more is expected."""
        return self.state is ObservabilityState.DONE

    def receive(self, msg: ProcessingRequest) -> list[Observed]:
        """Process one message; ``[Observed]`` when it ended the response, else ``[]``.

        Raises :class:`RemoteProtocolError` when the message is not allowed in the current state.
        """
        kind = msg.WhichOneof("request")
        handler = _TRANSITIONS.get((self.state, kind))
        if handler is None or (kind == "request_headers" and self._messages):
            raise RemoteProtocolError(
                f"unexpected {kind or 'empty'} message in observability stream state {self.state.value}"
            )
        self._messages += 1
        return handler(self, msg)

    def abort(self) -> None:
        """The stream is over; a response not yet complete is not reported. Idempotent."""
        self.state = ObservabilityState.DONE

    def _on_request_headers(self, msg: ProcessingRequest) -> list[Observed]:
        self.request_id = read_headers(msg.request_headers.headers).get(REQUEST_ID_HEADER, "")
        return []

    def _ignore(self, msg: ProcessingRequest) -> list[Observed]:
        return []

    def _on_response_headers(self, msg: ProcessingRequest) -> list[Observed]:
        headers = read_headers(msg.response_headers.headers)
        status_text = headers.get(":status", "")
        status = int(status_text) if status_text.isdigit() else 0
        streaming = "text/event-stream" in headers.get(CONTENT_TYPE, "")
        self._response = ResponseState(status, streaming, None, self._capture, hold=False)
        self.state = ObservabilityState.RESPONSE
        return self._done(True) if msg.response_headers.end_of_stream else []

    def _on_response_body(self, msg: ProcessingRequest) -> list[Observed]:
        assert self._response is not None
        data = msg.response_body.body
        self._response_bytes += len(data)
        self._response.chunk(data)
        return self._done(True) if msg.response_body.end_of_stream else []

    def _on_response_trailers(self, msg: ProcessingRequest) -> list[Observed]:
        grpc_status = read_headers(msg.response_trailers.trailers).get("grpc-status", "0")
        return self._done(grpc_status == "0")

    def _done(self, complete: bool) -> list[Observed]:
        resp = self._response
        assert resp is not None
        self.state = ObservabilityState.DONE
        usage = resp.usage() if complete else Usage()
        return [Observed(self.request_id, resp.status, resp.streaming, usage, self._response_bytes, complete)]


_Handler = Callable[[ObservabilitySession, ProcessingRequest], list[Observed]]

_TRANSITIONS: dict[tuple[ObservabilityState, str | None], _Handler] = {
    (ObservabilityState.REQUEST, "request_headers"): ObservabilitySession._on_request_headers,
    (ObservabilityState.REQUEST, "request_body"): ObservabilitySession._ignore,
    (ObservabilityState.REQUEST, "request_trailers"): ObservabilitySession._ignore,
    (ObservabilityState.REQUEST, "response_headers"): ObservabilitySession._on_response_headers,
    (ObservabilityState.RESPONSE, "response_body"): ObservabilitySession._on_response_body,
    (ObservabilityState.RESPONSE, "response_trailers"): ObservabilitySession._on_response_trailers,
}
