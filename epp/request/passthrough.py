"""Passthrough parser: no body parsing, for non-OpenAI bodies.

The body is forwarded untouched and never decoded. The request gets the API kind from ``:path``,
an empty model (the ``x-gateway-model-name-rewrite`` header, when present, still sets the target
model for scheduling, but the body is not rewritten) and an empty prompt, so prefix-cache scoring
sees nothing to match and falls back to load-based scoring.

As the ``passthrough-parser`` plugin it claims no paths, so in a parser chain it is the fallback for
every path no other parser claims. Response usage is still read when the model server reports an
OpenAI-compatible ``usage`` object (upstream reads none).
"""

from __future__ import annotations

from epp.request.parser import ParsedBody, api_kind_of

__all__ = ["PASSTHROUGH_PARSER_TYPE", "PassthroughParser"]

PASSTHROUGH_PARSER_TYPE = "passthrough-parser"


class PassthroughParser:
    """Accepts any body; extracts nothing from it."""

    __slots__ = ("name",)

    plugin_type = PASSTHROUGH_PARSER_TYPE
    claims: tuple[str, ...] = ()

    def __init__(self, name: str = PASSTHROUGH_PARSER_TYPE) -> None:
        self.name = name

    def parse(self, path: str, body: bytes) -> ParsedBody:
        return ParsedBody(api=api_kind_of(path), model="")

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        return body
