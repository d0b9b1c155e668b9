"""The parser chain of ``requestHandler.parsers``: which parser handles a request, by its path.

Built from the configured parsers in order (upstream's ``ParserRegistry``):

* a parser claiming no paths is the fallback; building stops there, so parsers listed after it
  are never used (a warning names them);
* a second parser of a type already in the chain is skipped (a warning names it);
* a request goes to the parser with the longest claimed suffix of its path (query string and
  trailing slash removed; a plain string suffix); none matching, to the fallback; without a
  fallback the request is rejected with HTTP 400 ``no parser registered matching path suffix``.

The path is ``:path``, else ``x-original-path``, else ``x-forwarded-path`` (:func:`path_of`); an
empty path is read as ``/v1/completions`` (upstream's default). The chain is itself a
:class:`~epp.request.parser.RequestParser`, so the protocol session uses it unchanged; it is
immutable and safe to share between streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from epp.request.errors import InvalidRequestError
from epp.request.parser import ParsedBody, ParserPlugin, rewrite_document_model

__all__ = ["DEFAULT_PATH", "ParserChain", "path_of"]

_log = structlog.get_logger(__name__)

DEFAULT_PATH = "/v1/completions"


def path_of(headers: Mapping[str, str]) -> str:
    """The request path a parser is chosen by: ``:path``, ``x-original-path`` or ``x-forwarded-path``
    (the first non-empty; "" when none)."""
    return headers.get(":path") or headers.get("x-original-path") or headers.get("x-forwarded-path") or ""


def request_path(path: str) -> str:
    """``path`` without its query string and trailing slash (empty: the default path)."""
    path = path.split("?", 1)[0].strip() or DEFAULT_PATH
    return path.rstrip("/")


_RESOLVED_LIMIT = 256
"""Distinct request paths whose parser is remembered (the per-request suffix scan is skipped)."""


class ParserChain:
    """Resolves a request path to one of the configured parsers (see the module docstring)."""

    __slots__ = ("_entries", "_fallback", "_resolved", "parsers")

    def __init__(self, parsers: Sequence[ParserPlugin]) -> None:
        """``parsers`` in configuration order; ValueError when empty."""
        if not parsers:
            raise ValueError("no parsers configured")
        entries: list[tuple[str, ParserPlugin]] = []
        kept: list[ParserPlugin] = []
        seen: set[str] = set()
        self._fallback: ParserPlugin | None = None
        for i, parser in enumerate(parsers):
            duplicate = parser.plugin_type in seen
            if duplicate:
                _log.warning(
                    "parser type already in the chain; skipping this entry",
                    parser=parser.name,
                    type=parser.plugin_type,
                )
            if not parser.claims:
                self._fallback = parser
                if not duplicate:
                    kept.append(parser)
                for skipped in parsers[i + 1 :]:
                    _log.warning(
                        "parser listed after the fallback parser is never used",
                        parser=skipped.name,
                        fallback=parser.name,
                    )
                break
            if duplicate:
                continue
            seen.add(parser.plugin_type)
            kept.append(parser)
            entries.extend((claim.strip().strip("/"), parser) for claim in parser.claims)
        self._entries = tuple(entries)
        self._resolved: dict[str, ParserPlugin] = {}  # request path -> parser, at most _RESOLVED_LIMIT
        self.parsers: tuple[ParserPlugin, ...] = tuple(kept)

    @property
    def name(self) -> str:
        return "requestHandler.parsers"

    def resolve(self, path: str) -> ParserPlugin:
        """The parser for ``path``; InvalidRequestError (400) when none claims it and there is no fallback."""
        found = self._resolved.get(path)
        if found is not None:
            return found
        clean = request_path(path)
        best: ParserPlugin | None = None
        best_len = 0
        for suffix, parser in self._entries:
            if len(suffix) > best_len and clean.endswith(suffix):
                best, best_len = parser, len(suffix)
        if best is not None:
            if len(self._resolved) >= _RESOLVED_LIMIT:  # clients choose paths: keep the map bounded
                self._resolved.clear()
            self._resolved[path] = best
            return best
        if self._fallback is not None:
            return self._fallback
        raise InvalidRequestError(f"no parser registered matching path suffix for: {clean}")

    def parse(self, path: str, body: bytes) -> ParsedBody:
        return self.resolve(path).parse(path or DEFAULT_PATH, body)

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        """The JSON object with ``model`` replaced, for parsers that rewrite (they keep ``document``);
        the body unchanged for the others (passthrough, gRPC and SGLang bodies)."""
        return rewrite_document_model(parsed, body, target_model)
