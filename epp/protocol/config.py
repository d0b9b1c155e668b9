"""Per-server settings shared by every :class:`~epp.protocol.session.Session` (immutable)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from epp.request.openai import OpenAIParser
from epp.request.parser import RequestParser
from scheduler.types import LLMRequest, SchedulingResult, Usage

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_BODY_BYTES",
    "ResponseHeadersFn",
    "ResponseMetadataFn",
    "SessionConfig",
]

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_CHUNK_SIZE = 62_000  # some proxies cap streamed chunks at 64 KiB

ResponseHeadersFn = Callable[[LLMRequest, SchedulingResult, str | None], Mapping[str, str]]
ResponseMetadataFn = Callable[[LLMRequest, SchedulingResult, Usage], Mapping[str, Mapping[str, float]]]


def _no_priority(objective: str | None) -> int:
    return 0


_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def _new_request_id() -> str:
    """A random (version 4) UUID string, as ``str(uuid.uuid4())`` makes it, in a third of the time."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Settings of the protocol core.

    ``parser`` turns bodies into requests. ``priority_of(objective_name_or_None) -> int`` resolves the
    ``x-gateway-inference-objective`` header (see :class:`epp.admission.ObjectivePriorities`).
    ``max_body_bytes`` is the request body limit (413 beyond). ``chunk_size`` bounds each
    StreamedBodyResponse body. ``request_id_factory`` makes ids for requests without ``x-request-id``.
    ``response_chunks`` makes the session emit a :class:`~epp.protocol.actions.ResponseChunk` per
    response body chunk (only needed when a plugin implements ``on_response_chunk``), or with
    ``first_chunk_only`` for the first chunk of each response alone (every such plugin needs only that).
    ``response_header_map`` passes every response header to
    :class:`~epp.protocol.actions.ResponseStarted` (for ``on_response_headers`` hooks); without it the
    session reads only the ones it needs itself (``:status``, ``content-type``, ``content-length``).
    ``usage_capture_bytes`` bounds the copy of a non-streamed response body kept to read its usage.
    ``response_headers(request, result, served_endpoint_or_None) -> headers`` (optional) adds headers
    to the client response when the model server's response headers arrive (e.g. the
    session-affinity token of :class:`scheduler.plugins.scorers.session_affinity.ResponseHeadersProvider`
    plugins). It must be pure and fast; an exception from it is logged and adds nothing.
    ``owned_request_headers`` (lower-case) are request headers that scheduling plugins own (e.g.
    ``x-prefiller-host-port``): a copy sent by the client is removed unless the result sets it.
    ``endpoint_subset_filter=False`` ignores the proxy's subset hint (``--disable-endpoint-subset-filter``:
    every endpoint is a candidate). ``emit_endpoint_scores`` adds the primary profile's total score of
    every candidate to the routing metadata, ``envoy.lb`` / ``x-gateway-destination-endpoint-scores``
    (address -> score), as llm-d-router's ``--emit-endpoint-scores``. ``agent_identity(headers) -> str``
    (optional; an ``agent-identity`` plugin's reader) gives the fairness id of a request without the
    fairness-id header ("" : the default fairness id), as llm-d-router's director.
    ``response_metadata(request, result, usage) -> {namespace: {key: number}}`` (optional; the
    ``request-attribute-reporter`` plugins) is added as dynamic metadata to the last ext_proc response
    for the response body when it ends (pure; an exception is logged and adds nothing).
    ``model_rewrite(model, request_id) -> target or None`` (optional; the InferenceModelRewrite rules,
    :class:`epp.admission.rewrites.ModelRewriter`) picks the model a JSON body is rewritten to before
    scheduling; a match takes precedence over the ``x-gateway-model-name-rewrite`` header, as in GIE.
    """

    parser: RequestParser = field(default_factory=OpenAIParser)
    priority_of: Callable[[str | None], int] = _no_priority
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    chunk_size: int = DEFAULT_CHUNK_SIZE
    request_id_factory: Callable[[], str] = _new_request_id
    response_chunks: bool = False
    first_chunk_only: bool = False
    response_header_map: bool = True
    usage_capture_bytes: int = 4 * 1024 * 1024
    response_headers: ResponseHeadersFn | None = None
    owned_request_headers: frozenset[str] = frozenset()
    endpoint_subset_filter: bool = True  # False: --disable-endpoint-subset-filter (ignore the hint)
    emit_endpoint_scores: bool = False  # --emit-endpoint-scores
    agent_identity: Callable[[Mapping[str, str]], str] | None = None
    response_metadata: ResponseMetadataFn | None = None
    model_rewrite: Callable[[str, str], str | None] | None = None

    def __post_init__(self) -> None:
        if self.max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be positive, got {self.max_body_bytes}")
        if not 0 < self.chunk_size <= 64 * 1024:
            raise ValueError(f"chunk_size must be in (0, 65536], got {self.chunk_size}")
