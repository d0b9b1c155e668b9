"""Actions the :class:`~epp.protocol.session.Session` asks its I/O loop to perform, in order.

All are value types (:func:`scheduler.values.value_type`). The loop handles each in the order returned:

* :class:`Send`: write ``response`` on the ext_proc stream.
* :class:`Schedule`: run admission and the scheduler for ``request`` (restricted to ``subset`` when
  not None; an empty subset must be rejected with 503), then call ``session.scheduled(result)`` or
  ``session.reject(status, error_type, message)`` and handle the actions those return.
* :class:`Dispatched`: the request is being sent to ``result``'s endpoints: fire ``on_dispatched``.
  Emitted exactly once per dispatched request, before the routing response's :class:`Send`.
* :class:`ResponseStarted`: the model server's response headers arrived: fire
  ``on_response_headers`` (at most once per dispatch).
* :class:`ResponseChunk`: one response body chunk passed through (only when the session was created
  with ``SessionConfig.response_chunks=True``): fire ``on_response_chunk``.
* :class:`Completed`: the dispatched request ended: fire ``on_completed``. Exactly once per
  :class:`Dispatched`, whatever the path (end of response, trailers, error, ``abort``).
* :class:`Observed`: an observability stream (see :mod:`epp.protocol.observability`) saw a response end:
  account its usage against the routed request with the same ``request_id``. Never emitted by
  :class:`~epp.protocol.session.Session`.

Ordering guarantee: in one batch, :class:`Dispatched` and :class:`Completed` come **before** the
:class:`Send` actions of that batch. Envoy may close the stream as soon as it has the last response it
needs, cancelling the loop while it awaits that write; a hook placed after the write would then be
skipped (``abort()`` cannot know that the loop never handled an action it already returned).
"""

from __future__ import annotations

from collections.abc import Mapping

from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingResponse

from scheduler.types import Completion, LLMRequest, SchedulingResult, Usage
from scheduler.values import value_type

__all__ = [
    "Action",
    "Completed",
    "Dispatched",
    "Observed",
    "ResponseChunk",
    "ResponseStarted",
    "Schedule",
    "Send",
]


@value_type
class Send:
    """Write ``response`` to the proxy."""

    response: ProcessingResponse


@value_type
class Schedule:
    """Admit and schedule ``request``; ``subset`` is the proxy's endpoint subset hint (None = all).

    Subset entries are ``ip:port`` (match the endpoint address exactly) or a bare IP (match the IP
    part); see :func:`epp.admission.subset_filter.select_subset`. ``header_only``: the request has no body
    (``end_of_stream`` on its headers, or request body mode NONE). ``body``: the request body as
    received (empty for a header-only request), for an async pre-scheduling step that needs it.
    """

    request: LLMRequest
    subset: frozenset[str] | None
    header_only: bool = False
    body: bytes = b""


@value_type
class Dispatched:
    """``request`` goes to ``result.endpoints`` (primary first): fire the dispatch hooks."""

    request: LLMRequest
    result: SchedulingResult


@value_type
class ResponseStarted:
    """The response headers arrived: HTTP ``status``; ``streaming`` when ``text/event-stream``.

    ``headers``: every response header (plus the served endpoint under ``x-gateway-destination-endpoint-
    served``), or only ``:status``/``content-type``/``content-length`` when
    ``SessionConfig.response_header_map`` is off (no plugin wants them).
    """

    request: LLMRequest
    result: SchedulingResult
    status: int
    streaming: bool
    headers: Mapping[str, str]


@value_type
class ResponseChunk:
    """One response body chunk, as received from the model server."""

    request: LLMRequest
    result: SchedulingResult
    chunk: bytes


@value_type
class Completed:
    """The dispatched request ended with ``completion`` (its outcome, status, usage, served endpoint)."""

    request: LLMRequest
    result: SchedulingResult
    completion: Completion


@value_type
class Observed:
    """An observed response ended: HTTP ``status``, ``streaming``, its ``usage`` and body size.

    ``request_id`` is the ``x-request-id`` of the observability stream's request headers ("" when absent).
    ``complete`` is False when the upstream ended the response with a non-zero ``grpc-status``
    trailer; ``usage`` is zeros for non-2xx responses or when the model server reported none.
    """

    request_id: str
    status: int
    streaming: bool
    usage: Usage
    response_bytes: int
    complete: bool


Action = Send | Schedule | Dispatched | ResponseStarted | ResponseChunk | Completed
"""What :class:`~epp.protocol.session.Session` returns (:class:`Observed` is not one of them)."""
