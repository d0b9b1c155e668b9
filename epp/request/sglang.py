"""``sglanghttp-parser``: SGLang's native ``/generate`` endpoint (pre-tokenized prompts only).

Requests (400 naming the problem otherwise): the path is exactly ``/generate`` (or ``generate``,
trailing slash ignored); the body a JSON object whose ``input_ids`` is a non-empty list of
unsigned 32-bit token ids (a batch of lists is refused, as upstream does); ``extra_key`` (optional)
a string, used as the cache salt; ``stream`` a boolean; ``sampling_params.max_new_tokens`` the
output cap (ignored when not a non-negative integer). The body has no model: the request's model
is empty (``x-gateway-model-name-rewrite`` still sets the target), and the body is never rewritten.
``prompt_text`` is the JSON text of ``input_ids``.

Response usage is read from ``meta_info`` (``prompt_tokens``, ``completion_tokens``,
``cached_tokens``): the whole JSON body, or in an SSE stream the first ``data:`` event whose
``meta_info.finish_reason`` is not null. Total = prompt + completion.
"""

from __future__ import annotations

from typing import Any

import orjson

from epp.request.errors import InvalidRequestError, json_error
from epp.request.parser import ParsedBody
from scheduler.types import ApiKind, Usage

__all__ = ["SGLANG_PARSER_TYPE", "SGLangHTTPParser", "SGLangUsage"]

SGLANG_PARSER_TYPE = "sglanghttp-parser"
_MAX_U32 = 2**32 - 1


def _token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_U32 for v in value
    )


def _meta_usage(doc: Any) -> Usage | None:
    meta = doc.get("meta_info") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return None
    prompt, completion, cached = (
        meta.get(k) for k in ("prompt_tokens", "completion_tokens", "cached_tokens")
    )
    if not isinstance(prompt, int) and not isinstance(completion, int):
        return None
    p = prompt if isinstance(prompt, int) else 0
    c = completion if isinstance(completion, int) else 0
    return Usage(p, c, p + c, cached if isinstance(cached, int) else 0)


class SGLangUsage:
    """Usage of SGLang ``/generate`` responses (see the module docstring)."""

    __slots__ = ()

    def read(self, body: bytes, streaming: bool) -> Usage | None:
        if not streaming:
            try:
                return _meta_usage(orjson.loads(body))
            except orjson.JSONDecodeError:
                return None
        for line in body.split(b"\n"):
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                continue
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            meta = doc.get("meta_info") if isinstance(doc, dict) else None
            if isinstance(meta, dict) and meta.get("finish_reason") is not None:
                return _meta_usage(doc)
        return None


_USAGE = SGLangUsage()


class SGLangHTTPParser:
    """Parser of SGLang ``/generate`` bodies (see the module docstring)."""

    __slots__ = ("name",)

    plugin_type = SGLANG_PARSER_TYPE
    claims = ("generate",)

    def __init__(self, name: str = SGLANG_PARSER_TYPE) -> None:
        self.name = name

    def parse(self, path: str, body: bytes) -> ParsedBody:
        clean = path.split("?", 1)[0].strip().rstrip("/")
        if clean not in ("generate", "/generate"):
            raise InvalidRequestError(f"unsupported path: {clean}")
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise json_error(exc, body, "generate request body") from None
        if not isinstance(doc, dict):
            raise InvalidRequestError("invalid generate request: body must be a JSON object")
        ids = doc.get("input_ids")
        if ids is None:
            raise InvalidRequestError("invalid generate request: input_ids must be provided")
        if not _token_ids(ids):
            raise InvalidRequestError(
                "invalid generate request: input_ids must be an array of uint32 integers"
            )
        if not ids:
            raise InvalidRequestError("invalid generate request: input_ids cannot be empty")
        salt = doc.get("extra_key")
        if salt is not None and not isinstance(salt, str):
            raise InvalidRequestError("unsupported generate request: extra_key must be a string")
        stream = doc.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise InvalidRequestError("invalid generate request: 'stream' must be a boolean")
        params = doc.get("sampling_params")
        cap = params.get("max_new_tokens") if isinstance(params, dict) else None
        max_tokens = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0 else None
        return ParsedBody(
            api=ApiKind.OTHER,
            model="",
            prompt_text=orjson.dumps(ids).decode(),
            stream=bool(stream),
            cache_salt=salt or "",
            max_tokens=max_tokens,
            usage_reader=_USAGE,
        )

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        return body
