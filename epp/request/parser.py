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

from scheduler.types import ApiKind
from scheduler.values import value_type

__all__ = ["ParsedBody", "RequestParser", "api_kind_of"]

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


@value_type
class ParsedBody:
    """What a parser extracted from one request body.

    ``prompt_text`` is the text used for prefix hashing ("" when unknown); ``messages`` the chat
    messages (chat only); ``document`` the decoded JSON object (None for passthrough), kept so a model
    rewrite does not decode twice. ``max_tokens`` is None when absent.
    """

    api: ApiKind
    model: str
    prompt_text: str = ""
    messages: tuple[Mapping[str, Any], ...] | None = None
    stream: bool = False
    cache_salt: str = ""
    max_tokens: int | None = None
    document: Mapping[str, Any] | None = None


class RequestParser(Protocol):
    """Turns request bodies into :class:`ParsedBody` values. Stateless and thread-safe."""

    @property
    def name(self) -> str:
        """Configuration name of the parser (``openai``, ``passthrough``)."""
        ...

    def parse(self, path: str, body: bytes) -> ParsedBody:
        """Parse ``body`` sent to ``path``. Raises InvalidRequestError (400) for a malformed body."""
        ...

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        """The body to forward with ``model`` replaced by ``target_model`` (called only when they differ)."""
        ...
