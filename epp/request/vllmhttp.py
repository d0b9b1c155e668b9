"""``vllmhttp-parser``: vLLM's ``/inference/v1/generate`` endpoint (pre-tokenized prompts).

Requests (400 naming the problem otherwise): the path ends with ``inference/v1/generate``; the body
a JSON object whose ``token_ids`` is a non-empty list of unsigned 32-bit token ids; ``model`` a
string (optional: without it the request's model is empty, as upstream); ``stream`` a boolean;
``sampling_params.max_tokens`` the output cap. ``cache_salt`` (a string) is the cache salt.
``prompt_text`` is the JSON text of ``token_ids``. The model rewrite sets ``model`` in the body.

Responses share the OpenAI ``usage`` shape, read as for ``openai-parser``.
"""

from __future__ import annotations

from typing import Any

import orjson

from epp.request.errors import InvalidRequestError, json_error
from epp.request.parser import ParsedBody, rewrite_document_model
from scheduler.types import ApiKind

__all__ = ["VLLMHTTP_PARSER_TYPE", "VllmHTTPParser"]

VLLMHTTP_PARSER_TYPE = "vllmhttp-parser"
_SUFFIX = "inference/v1/generate"
_MAX_U32 = 2**32 - 1


def _string(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidRequestError(f"invalid generate request: '{key}' must be a string")
    return value


class VllmHTTPParser:
    """Parser of vLLM ``/inference/v1/generate`` bodies (see the module docstring)."""

    __slots__ = ("name",)

    plugin_type = VLLMHTTP_PARSER_TYPE
    claims = (_SUFFIX,)

    def __init__(self, name: str = VLLMHTTP_PARSER_TYPE) -> None:
        self.name = name

    def parse(self, path: str, body: bytes) -> ParsedBody:
        clean = path.split("?", 1)[0]
        if not clean.endswith(_SUFFIX):
            raise InvalidRequestError(f"unsupported path: {clean}")
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise json_error(exc, body) from None
        if not isinstance(doc, dict):
            raise InvalidRequestError("request body must be a JSON object")
        ids = doc.get("token_ids")
        if ids is not None and not (
            isinstance(ids, list)
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_U32 for v in ids)
        ):
            raise InvalidRequestError(
                "invalid generate request: 'token_ids' must be a list of uint32 token ids"
            )
        if not ids:
            raise InvalidRequestError("invalid generate request: must have non-empty token_ids field")
        model, salt = _string(doc, "model"), _string(doc, "cache_salt")
        stream = doc.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise InvalidRequestError("invalid generate request: 'stream' must be a boolean")
        params = doc.get("sampling_params")
        cap = params.get("max_tokens") if isinstance(params, dict) else None
        max_tokens = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0 else None
        return ParsedBody(
            api=ApiKind.OTHER,
            model=model,
            prompt_text=orjson.dumps(ids).decode(),
            stream=bool(stream),
            cache_salt=salt,
            max_tokens=max_tokens,
            document=doc,
        )

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        return rewrite_document_model(parsed, body, target_model)
