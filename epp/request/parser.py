"""The request-parser contract: raw request body bytes in, a :class:`ParsedBody` out.

A parser is pure and stateless (one instance serves every stream concurrently). ``parse`` raises
:class:`~epp.request.errors.InvalidRequestError` (HTTP 400) with a message naming the offending field;
any other exception is a bug. ``rewrite_model`` returns the body to forward when the target model
differs from the requested one (``x-gateway-model-name-rewrite``); it is called only then, so an
unchanged body is always forwarded as the original bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from scheduler.types import ApiKind, Usage
from scheduler.values import value_type

__all__ = [
    "NO_USAGE",
    "ParsedBody",
    "ParserPlugin",
    "RequestParser",
    "UsageReader",
    "api_kind_of",
    "rewrite_document_model",
]

_SUFFIXES: tuple[tuple[str, ApiKind], ...] = (
    ("/chat/completions", ApiKind.CHAT_COMPLETIONS),
    ("/completions", ApiKind.COMPLETIONS),
    ("/embeddings", ApiKind.EMBEDDINGS),
    ("/responses", ApiKind.RESPONSES),
    ("/conversations", ApiKind.CONVERSATIONS),
)


def api_kind_of(path: str) -> ApiKind:
    """The API addressed by ``:path`` (query string and trailing slash ignored); OTHER if unknown."""
    end = path.find("?")
    if end >= 0:
        path = path[:end]
    path = path.rstrip("/")
    for suffix, kind in _SUFFIXES:
        if path.endswith(suffix):
            return kind
    return ApiKind.OTHER


class UsageReader(Protocol):
    """Reads the token usage out of a model server's response to a request of one format.

    ``read(body, streaming)`` gets the bytes the response state kept: the whole (captured)
    non-streamed body, or for ``text/event-stream`` responses the first and the last chunks joined.
    It returns None when the body reports no usage; it never raises for a malformed body.
    """

    def read(self, body: bytes, streaming: bool) -> Usage | None: ...


class _NoUsage:
    """The reader of a format whose responses are not processed (upstream ``SkipResponseProcessing``)."""

    __slots__ = ()

    def read(self, body: bytes, streaming: bool) -> Usage | None:
        return None


NO_USAGE: UsageReader = _NoUsage()


@value_type
class ParsedBody:
    """What a parser extracted from one request body.

    ``prompt_text`` is the text used for prefix hashing ("" when unknown); ``messages`` the chat
    messages (chat only); ``document`` the decoded JSON object (None for passthrough), kept so a model
    rewrite does not decode twice; a parser sets it only when it rewrites the model in that JSON
    object. ``max_tokens`` is None when absent. ``usage_reader`` reads the response usage of this
    format; None means the OpenAI-compatible ``usage`` object (JSON or SSE).
    """

    api: ApiKind
    model: str
    prompt_text: str = ""
    messages: tuple[Mapping[str, Any], ...] | None = None
    stream: bool = False
    cache_salt: str = ""
    max_tokens: int | None = None
    document: Mapping[str, Any] | None = None
    usage_reader: UsageReader | None = None


class RequestParser(Protocol):
    """Turns request bodies into :class:`ParsedBody` values. Stateless and thread-safe."""

    @property
    def name(self) -> str:
        """Instance name of the parser (its ``plugins`` entry name, or its type when defaulted)."""
        ...

    def parse(self, path: str, body: bytes) -> ParsedBody:
        """Parse ``body`` sent to ``path``. Raises InvalidRequestError (400) for a malformed body."""
        ...

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        """The body to forward with ``model`` replaced by ``target_model`` (called only when they differ)."""
        ...


class ParserPlugin(RequestParser, Protocol):
    """A request parser declared in ``plugins`` and listed in ``requestHandler.parsers``.

    ``claims`` are the path suffixes it handles (a plain string suffix of ``:path`` without its
    query and trailing slash; the longest matching suffix wins across the chain); an empty tuple
    makes it the fallback for every path no other parser claims.
    """

    @property
    def plugin_type(self) -> str: ...

    @property
    def claims(self) -> tuple[str, ...]: ...


def rewrite_document_model(parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
    """The parsed JSON object with ``model`` replaced, or ``body`` unchanged when the parser kept no
    document (passthrough, gRPC and SGLang bodies are never rewritten)."""
    if parsed.document is None:
        return body
    doc = dict(parsed.document)
    doc["model"] = target_model
    return orjson.dumps(doc)
