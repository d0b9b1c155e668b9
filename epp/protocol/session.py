"""The per-stream ext_proc state machine (sans-I/O): ProcessingRequest messages in, actions out.

One :class:`Session` per ext_proc stream (= one HTTP request). The I/O loop feeds every message to
:meth:`Session.receive` and performs the returned actions in order (see :mod:`epp.protocol.actions`);
it answers a :class:`~epp.protocol.actions.Schedule` with :meth:`Session.scheduled` or
:meth:`Session.reject`, and always calls :meth:`Session.abort` in its ``finally`` so that a dispatched
request gets exactly one :class:`~epp.protocol.actions.Completed`. The session owns the protocol; what
the request is (body parsing, model rewrite, fairness id, priority) comes from :mod:`epp.protocol.intake`,
and the reply messages are built by :mod:`epp.protocol.replies`.

States and the messages each accepts (anything else raises RemoteProtocolError)::

    HEADERS     --request_headers-->  BODY | SCHEDULING (end_of_stream or body mode NONE)
    BODY        --request_body-->     BODY | SCHEDULING (end_of_stream)
    BODY        --request_trailers--> SCHEDULING
    SCHEDULING  --scheduled()-->      DISPATCHED;  --reject()--> CLOSED
    DISPATCHED  --request_trailers--> DISPATCHED (BUFFERED: trailers after the body was answered)
    DISPATCHED  --response_headers--> RESPONDING | COMPLETE (end_of_stream or body mode NONE)
    RESPONDING  --response_body-->    RESPONDING | COMPLETE (end_of_stream)
    RESPONDING  --response_trailers-> COMPLETE
    COMPLETE    --response_trailers-> COMPLETE
    DISPATCHED  --observed_end()-->   CLOSED (an observability stream saw the response end)
    any         --abort()-->          CLOSED

Body modes come from ``ProcessingRequest.protocol_config`` (sent by Envoy on a stream's first
message); without it FULL_DUPLEX_STREAMED, the Go EPP's mode, is assumed. Request bodies:
FULL_DUPLEX_STREAMED defers the headers response until the body is complete and scheduled, then sends
it followed by the body as StreamedBodyResponse chunks; BUFFERED answers the headers at once and
routes in the BodyResponse; NONE routes on the headers. STREAMED and BUFFERED_PARTIAL request bodies
are refused (they cannot carry the routing decision). Response bodies: FULL_DUPLEX_STREAMED, STREAMED,
BUFFERED and NONE.

Error handling inside :meth:`receive`: a :class:`~epp.request.errors.RequestError` becomes its HTTP
error as an ImmediateResponse; any other exception (a bug) a 500 ImmediateResponse with a short
message; protocol errors propagate.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Final

import structlog
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    ProcessingRequest,
    ProcessingResponse,
)

from epp.protocol import messages as m
from epp.protocol.actions import (
    Action,
    Completed,
    Dispatched,
    ResponseChunk,
    ResponseStarted,
    Schedule,
    Send,
)
from epp.protocol.config import SessionConfig
from epp.protocol.errors import LocalProtocolError, RemoteProtocolError
from epp.protocol.headers import (
    CONTENT_LENGTH,
    CONTENT_TYPE,
    CONTROL_HEADERS,
    DESTINATION_HEADER,
    DESTINATION_SERVED_KEY,
    LB_NAMESPACE,
    REQUEST_ID_HEADER,
    metadata_value,
    read_headers,
)
from epp.protocol.intake import assemble, read_body
from epp.protocol.replies import (
    endpoint_scores,
    response_body_replies,
    routing_replies,
    with_response_metadata,
)
from epp.protocol.response import ResponseState
from epp.protocol.subset import subset_hint
from epp.request.build import MODEL_REWRITE_HEADERS, header_value
from epp.request.errors import INTERNAL_ERROR, UNAVAILABLE, BodyTooLargeError, RequestError
from epp.request.parser import ParsedBody, UsageReader, api_kind_of
from scheduler.types import Completion, LLMRequest, Outcome, SchedulingResult, Usage

__all__ = ["Session", "State"]

_log = structlog.get_logger(__name__)

_FULL_DUPLEX: Final = ProcessingMode.FULL_DUPLEX_STREAMED
_BUFFERED: Final = ProcessingMode.BUFFERED
_STREAMED: Final = ProcessingMode.STREAMED
_NONE: Final = ProcessingMode.NONE
_REQUEST_MODES = frozenset({_FULL_DUPLEX, _BUFFERED, _NONE})
_RESPONSE_MODES = frozenset({_FULL_DUPLEX, _BUFFERED, _STREAMED, _NONE})


class State(enum.Enum):
    HEADERS = "headers"
    BODY = "body"
    SCHEDULING = "scheduling"
    DISPATCHED = "dispatched"
    RESPONDING = "responding"
    COMPLETE = "complete"
    CLOSED = "closed"

    # Members are singletons: identity hashing (C) instead of Enum's hash of the name (Python), for the
    # transition table lookup on every message.
    __hash__ = object.__hash__


# Module-level aliases: reading ``State.X`` costs ~60 ns more than a global on Python 3.11.
_HEADERS, _BODY, _SCHEDULING, _DISPATCHED = State.HEADERS, State.BODY, State.SCHEDULING, State.DISPATCHED
_RESPONDING, _COMPLETE, _CLOSED = State.RESPONDING, State.COMPLETE, State.CLOSED
_OK, _UPSTREAM_ERROR = Outcome.OK, Outcome.UPSTREAM_ERROR
_OWN_RESPONSE_HEADERS = frozenset({":status", CONTENT_TYPE, CONTENT_LENGTH})


class Session:
    """State of one ext_proc stream. Not thread-safe; drive it from one task."""

    __slots__ = (
        "_body",
        "_body_size",
        "_changed_body",
        "_chunks",
        "_config",
        "_generated_id",
        "_header_only",
        "_headers",
        "_request",
        "_request_mode",
        "_request_trailers",
        "_response",
        "_response_mode",
        "_result",
        "_rewrite",
        "_served",
        "_subset",
        "_usage_reader",
        "state",
    )

    def __init__(self, config: SessionConfig) -> None:
        self._config = config
        self.state = _HEADERS
        self._request_mode: int = _FULL_DUPLEX
        self._response_mode: int = _FULL_DUPLEX
        self._headers: dict[str, str] = {}
        self._generated_id: str | None = None
        self._subset: frozenset[str] | None = None
        self._chunks: list[bytes] = []
        self._usage_reader: UsageReader | None = None
        self._body_size = 0
        self._body = b""
        self._changed_body: bytes | None = None
        self._header_only = False
        self._request_trailers = False
        self._request: LLMRequest | None = None
        self._result: SchedulingResult | None = None
        self._rewrite: tuple[str, str] | None = None
        self._response: ResponseState | None = None
        self._served: str | None = None

    # ----------------------------------------------------------------------------------- public API

    @property
    def request(self) -> LLMRequest | None:
        """The request, once its body is complete (None before)."""
        return self._request

    @property
    def dispatched(self) -> bool:
        """True between :meth:`scheduled` and the :class:`Completed` action."""
        return self.state in (_DISPATCHED, _RESPONDING)

    @property
    def response_bytes(self) -> int:
        """Response body bytes received so far (0 before the response headers)."""
        resp = self._response
        return resp.size if resp is not None else 0

    @property
    def sees_response_body(self) -> bool:
        """False when the proxy's response body mode is NONE: the body (its size, its usage) is not
        seen on this stream (in the ``observability`` variant an observability stream sees it instead)."""
        return bool(self._response_mode != _NONE)

    def receive(self, msg: ProcessingRequest) -> list[Action]:
        """Process one message from the proxy; return the actions to perform, in order.

        Raises :class:`RemoteProtocolError` when the message is not allowed in the current state.
        """
        kind = msg.WhichOneof("request")
        handler = _TRANSITIONS.get((self.state, kind))
        if handler is None:
            raise RemoteProtocolError(f"unexpected {kind or 'empty'} message in state {self.state.value}")
        try:
            return handler(self, msg)
        except RequestError as exc:
            return self._fail(exc.status, exc.error_type, exc.message)
        except RemoteProtocolError:
            raise
        except Exception:
            _log.exception("ext_proc session bug", state=self.state.value, message=kind)
            return self._fail(500, INTERNAL_ERROR, "internal error in the endpoint picker")

    def scheduled(self, result: SchedulingResult) -> list[Action]:
        """Route the pending request to ``result`` (primary first, then fallbacks).

        Returns ``[Dispatched, Send(routing response), Send(body chunks)...]``. A result with no
        endpoint is answered with 503. Raises :class:`LocalProtocolError` unless a Schedule is pending.
        """
        if self.state is not _SCHEDULING or self._request is None:
            raise LocalProtocolError(f"scheduled() called in state {self.state.value}")
        if not result.endpoints:
            return self.reject(503, UNAVAILABLE, "the scheduler returned no endpoint")
        destination = ",".join(result.addresses)
        set_headers = {DESTINATION_HEADER: destination}
        set_headers.update(result.headers)
        if self._generated_id is not None:
            set_headers[REQUEST_ID_HEADER] = self._generated_id
        if self._changed_body is not None:
            set_headers[CONTENT_LENGTH] = str(len(self._changed_body))
        replies = routing_replies(
            request_mode=self._request_mode,
            header_only=self._header_only,
            set_headers=set_headers,
            remove=[h for h in CONTROL_HEADERS if h in self._headers]
            + [h for h in self._config.owned_request_headers if h in self._headers and h not in set_headers],
            destination=destination,
            body=self._body,
            changed_body=self._changed_body,
            chunk_size=self._config.chunk_size,
            trailers=self._request_trailers,
            scores=endpoint_scores(result) if self._config.emit_endpoint_scores else None,
        )
        out: list[Action] = [Dispatched(self._request, result)]
        out.extend(Send(r) for r in replies)
        self._body = b""
        self._changed_body = None
        self._result = result
        self.state = _DISPATCHED
        return out

    def reject(self, status: int, error_type: str, message: str) -> list[Action]:
        """Answer the pending request with an HTTP error (429/503 from admission, 503, 500...)."""
        if self.state is not _SCHEDULING:
            raise LocalProtocolError(f"reject() called in state {self.state.value}")
        return self._fail(status, error_type, message)

    def abort(self, outcome: Outcome) -> list[Action]:
        """The stream is over (for any reason): ``[Completed]`` if a dispatch is still open, else ``[]``.

        Idempotent; the session is CLOSED afterwards. Call it from the loop's ``finally`` with the
        outcome it observed (CLIENT_CANCEL, STREAM_RESET, TIMEOUT, SHUTDOWN).
        """
        out = self._complete(outcome) if self.dispatched else []
        self.state = _CLOSED
        return out

    def observed_end(self, status: int, usage: Usage, complete: bool) -> list[Action]:
        """An observability stream saw the response of this dispatch end (this stream skipped that phase).

        ``[Completed]`` with outcome OK and ``usage`` for a ``complete`` 2xx response, else
        UPSTREAM_ERROR with ``status``; ``[]`` when no dispatch is open. The session is CLOSED afterwards.
        """
        if not self.dispatched:
            self.state = _CLOSED
            return []
        assert self._request is not None and self._result is not None
        ok = complete and 200 <= status < 300
        completion = Completion(
            outcome=_OK if ok else _UPSTREAM_ERROR,
            status_code=status,
            served_endpoint=self._served,
            usage=usage if ok else Usage(),
        )
        self.state = _CLOSED
        return [Completed(self._request, self._result, completion)]

    # ------------------------------------------------------------------------------- request path

    def _on_request_headers(self, msg: ProcessingRequest) -> list[Action]:
        if msg.HasField("protocol_config"):
            self._request_mode = msg.protocol_config.request_body_mode
            self._response_mode = msg.protocol_config.response_body_mode
            if self._request_mode not in _REQUEST_MODES:
                raise RemoteProtocolError(
                    f"request_body_mode {ProcessingMode.BodySendMode.Name(self._request_mode)} is not "
                    "supported; use FULL_DUPLEX_STREAMED (or BUFFERED)"
                )
            if self._response_mode not in _RESPONSE_MODES:
                raise RemoteProtocolError(
                    f"response_body_mode {ProcessingMode.BodySendMode.Name(self._response_mode)} "
                    "is not supported"
                )
        self._headers = headers = read_headers(msg.request_headers.headers)
        if not headers.get(REQUEST_ID_HEADER):
            self._generated_id = self._config.request_id_factory()
        if self._config.endpoint_subset_filter:
            self._subset = subset_hint(msg.metadata_context)
        length = headers.get(CONTENT_LENGTH)
        if length is not None and length.isdigit() and int(length) > self._config.max_body_bytes:
            raise BodyTooLargeError(int(length), self._config.max_body_bytes)
        if msg.request_headers.end_of_stream or self._request_mode == _NONE:
            self._header_only = True
            model = header_value(headers, MODEL_REWRITE_HEADERS) or ""
            return self._schedule(ParsedBody(api=api_kind_of(headers.get(":path", "")), model=model))
        self.state = _BODY
        if self._request_mode == _BUFFERED:
            return [Send(m.headers_response("request_headers"))]
        return []

    def _on_request_body(self, msg: ProcessingRequest) -> list[Action]:
        if self._subset is None and self._config.endpoint_subset_filter:
            self._subset = subset_hint(msg.metadata_context)
        chunk = msg.request_body.body
        if chunk:
            self._body_size += len(chunk)
            if self._body_size > self._config.max_body_bytes:
                raise BodyTooLargeError(self._body_size, self._config.max_body_bytes)
            self._chunks.append(chunk)
        # BUFFERED sends the whole body in one message, without end_of_stream when trailers follow
        # (which Envoy sends only after this body is answered).
        if msg.request_body.end_of_stream or self._request_mode == _BUFFERED:
            return self._end_of_body()
        return []

    def _on_late_request_trailers(self, msg: ProcessingRequest) -> list[Action]:
        return [Send(m.trailers_response("request_trailers"))]

    def _on_request_trailers(self, msg: ProcessingRequest) -> list[Action]:
        self._request_trailers = True
        return self._end_of_body()

    def _end_of_body(self) -> list[Action]:
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._body = body
        request_id = self._headers.get(REQUEST_ID_HEADER) or self._generated_id or ""
        parsed, by_rule, self._changed_body, self._rewrite = read_body(
            self._config, self._headers, body, request_id
        )
        self._usage_reader = parsed.usage_reader
        return self._schedule(parsed, by_rule)

    def _schedule(self, parsed: ParsedBody, target_model: str | None = None) -> list[Action]:
        headers = self._headers
        request_id = headers.get(REQUEST_ID_HEADER) or self._generated_id or ""
        self._request = request = assemble(
            self._config, headers, parsed, request_id, self._body_size, target_model
        )
        self.state = _SCHEDULING
        return [Schedule(request, self._subset, self._header_only, self._body)]

    # ------------------------------------------------------------------------------ response path

    def _on_response_headers(self, msg: ProcessingRequest) -> list[Action]:
        assert self._request is not None and self._result is not None
        self._note_served(msg)
        if self._config.response_header_map:
            headers = read_headers(msg.response_headers.headers)
            if self._served is not None:  # hooks learn which endpoint served (a fallback may have)
                headers[DESTINATION_SERVED_KEY] = self._served
        else:  # no hook wants them: read only what the session itself needs
            headers = read_headers(msg.response_headers.headers, _OWN_RESPONSE_HEADERS)
        status_text = headers.get(":status", "")
        status = int(status_text) if status_text.isdigit() else 0
        streaming = "text/event-stream" in headers.get(CONTENT_TYPE, "")
        hold = self._response_mode != _STREAMED  # STREAMED answers every chunk: rewrite in place
        capture = self._config.usage_capture_bytes
        self._response = resp = ResponseState(
            status, streaming, self._rewrite, capture, hold, self._usage_reader
        )
        rewritten = resp.rewrites and self._response_mode != _BUFFERED and CONTENT_LENGTH in headers
        remove = [CONTENT_LENGTH] if rewritten else []
        extra = self._extra_response_headers()
        mutation = m.header_mutation(extra, remove) if extra or remove else None
        out: list[Action] = [ResponseStarted(self._request, self._result, status, streaming, headers)]
        self.state = _RESPONDING
        if msg.response_headers.end_of_stream or self._response_mode == _NONE:
            out.extend(self._complete(None))
        out.append(Send(m.headers_response("response_headers", mutation)))
        return out

    def _extra_response_headers(self) -> Mapping[str, str]:
        provider = self._config.response_headers
        if provider is None:
            return {}
        assert self._request is not None and self._result is not None
        try:
            return provider(self._request, self._result, self._served)
        except Exception:
            _log.exception("response header provider failed", request_id=self._request.request_id)
            return {}

    def _on_response_body(self, msg: ProcessingRequest) -> list[Action]:
        resp = self._response
        assert resp is not None and self._request is not None and self._result is not None
        if self._served is None:
            self._note_served(msg)
        body = msg.response_body
        data = body.body
        eos = body.end_of_stream
        out: list[Action] = []
        forward = resp.chunk(data)
        if self._config.response_chunks and (resp.chunks == 1 or not self._config.first_chunk_only):
            out.append(ResponseChunk(self._request, self._result, data))
        completed: list[Action] = []
        if eos:
            if resp.holds_body:
                forward = resp.finish()
            completed = self._complete(None)
            out.extend(completed)  # before the Sends: a failed write cannot skip it
        replies = response_body_replies(self._response_mode, data, forward, eos, self._config.chunk_size)
        if completed and replies:
            replies[-1] = with_response_metadata(self._config.response_metadata, replies[-1], completed[0])
        out.extend(Send(reply) for reply in replies)
        return out

    def _on_response_trailers(self, msg: ProcessingRequest) -> list[Action]:
        self._note_served(msg)
        out: list[Action] = []
        resp = self._response
        held = resp.finish() if self.state is _RESPONDING and resp is not None else None
        completed: list[Action] = []
        if self.state is _RESPONDING:
            grpc_status = read_headers(msg.response_trailers.trailers).get("grpc-status", "0")
            completed = self._complete(None if grpc_status == "0" else _UPSTREAM_ERROR)
            out.extend(completed)
        replies: list[ProcessingResponse] = []
        if held is not None and self._response_mode == _FULL_DUPLEX:
            replies = list(m.streamed_body("response_body", held, self._config.chunk_size, False))
        replies.append(m.trailers_response("response_trailers"))
        if completed:
            i = len(replies) - 2 if len(replies) > 1 else 0  # the last body reply, else the trailers'
            replies[i] = with_response_metadata(self._config.response_metadata, replies[i], completed[0])
        out.extend(Send(r) for r in replies)
        return out

    def _note_served(self, msg: ProcessingRequest) -> None:
        if msg.HasField("metadata_context"):
            served = metadata_value(msg.metadata_context, LB_NAMESPACE, DESTINATION_SERVED_KEY)
            if isinstance(served, str) and served:
                self._served = served

    # ---------------------------------------------------------------------------------- endings

    def _complete(self, outcome: Outcome | None) -> list[Action]:
        """The one place that emits Completed; ``outcome`` None = derive it from the response status."""
        assert self._request is not None and self._result is not None
        resp = self._response
        status = resp.status if resp is not None else 0
        if outcome is None:
            outcome = _OK if 200 <= status < 300 else _UPSTREAM_ERROR
        completion = Completion(
            outcome=outcome,
            status_code=status,
            served_endpoint=self._served,
            usage=resp.usage() if resp is not None and outcome is _OK else Usage(),
            output_chunks=resp.chunks if resp is not None else 0,
            decode_seconds=resp.decode_seconds() if resp is not None and outcome is _OK else 0.0,
        )
        self.state = _COMPLETE
        return [Completed(self._request, self._result, completion)]

    def _fail(self, status: int, error_type: str, message: str) -> list[Action]:
        extra = {REQUEST_ID_HEADER: self._generated_id} if self._generated_id else None
        out: list[Action] = []
        if self.dispatched:  # Completed before the Send (see the ordering guarantee in actions.py)
            assert self._request is not None and self._result is not None
            completion = Completion(_UPSTREAM_ERROR, status_code=status)
            out.append(Completed(self._request, self._result, completion))
        out.append(Send(m.immediate_error(status, error_type, message, extra)))
        self.state = _CLOSED
        self._chunks = []
        self._body = b""
        return out


_Handler = Callable[[Session, ProcessingRequest], list[Action]]

_TRANSITIONS: dict[tuple[State, str | None], _Handler] = {
    (State.HEADERS, "request_headers"): Session._on_request_headers,
    (State.BODY, "request_body"): Session._on_request_body,
    (State.BODY, "request_trailers"): Session._on_request_trailers,
    (State.DISPATCHED, "request_trailers"): Session._on_late_request_trailers,
    (State.DISPATCHED, "response_headers"): Session._on_response_headers,
    (State.RESPONDING, "response_body"): Session._on_response_body,
    (State.RESPONDING, "response_trailers"): Session._on_response_trailers,
    (State.COMPLETE, "response_trailers"): Session._on_response_trailers,
}
