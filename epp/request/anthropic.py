"""``anthropic-parser``: the Anthropic Messages API (``/v1/messages``, ``/v1/messages/count_tokens``).

Requests (every violation is an HTTP 400 naming the problem):

* ``.../messages/count_tokens``: forwarded untouched, nothing extracted, the response is not read;
* ``.../messages``: a JSON object with a non-empty ``messages`` list of objects (each with a string
  ``role`` and a ``content`` that is a string or a list of block objects); ``model`` a non-empty
  string (the model rewrite of ``x-gateway-model-name-rewrite`` sets it in the body); ``stream`` a
  boolean; ``system`` a string or a list of blocks; ``max_tokens`` a non-negative integer;
  ``cache_salt`` a string (the prefix-cache salt);
* any other path claimed by no one else: 400 ``unsupported API endpoint``.

``prompt_text`` (for prefix hashing and the token estimate) is the canonical JSON of ``system``
followed by ``messages`` (see :func:`~epp.request.openai.canonical_json`).

Response usage (upstream's rules): JSON bodies read ``usage.input_tokens``, ``output_tokens`` and
``cache_read_input_tokens`` (cached); SSE streams read ``input_tokens`` / ``cache_read_input_tokens``
from the ``message_start`` event's ``message.usage`` and ``output_tokens`` from ``message_delta``
events (the last wins). Total = input + output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from epp.request.errors import InvalidRequestError, json_error
from epp.request.openai import canonical_json
from epp.request.parser import NO_USAGE, ParsedBody, api_kind_of, rewrite_document_model
from scheduler.types import ApiKind, Usage

__all__ = ["ANTHROPIC_CLAIMS", "ANTHROPIC_PARSER_TYPE", "AnthropicParser", "AnthropicUsage"]

ANTHROPIC_PARSER_TYPE = "anthropic-parser"
ANTHROPIC_CLAIMS = ("messages", "messages/count_tokens")


def _count(mapping: Mapping[str, Any], key: str) -> int | None:
    value = mapping.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


class AnthropicUsage:
    """Usage of Anthropic Messages responses (JSON or SSE; see the module docstring)."""

    __slots__ = ()

    def read(self, body: bytes, streaming: bool) -> Usage | None:
        return _stream_usage(body) if streaming else _json_usage(body)


def _json_usage(body: bytes) -> Usage | None:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    usage = doc.get("usage") if isinstance(doc, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage, "input_tokens") or 0
    completion = _count(usage, "output_tokens") or 0
    cached = _count(usage, "cache_read_input_tokens") or 0
    return Usage(prompt, completion, prompt + completion, cached)


def _stream_usage(data: bytes) -> Usage | None:
    found = False
    prompt = completion = cached = 0
    for line in data.split(b"\n"):
        if not line.startswith(b"data: ") or b"usage" not in line:
            continue
        try:
            event = orjson.loads(line[6:])
        except orjson.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("type") == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            if isinstance(usage, dict):
                found = True
                prompt = _count(usage, "input_tokens") or prompt
                cached = _count(usage, "cache_read_input_tokens") or cached
        elif event.get("type") == "message_delta" and isinstance(event.get("usage"), dict):
            found = True
            completion = _count(event["usage"], "output_tokens") or completion
    return Usage(prompt, completion, prompt + completion, cached) if found else None


_USAGE = AnthropicUsage()


def _messages(value: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not value:
        raise InvalidRequestError("invalid messages request: must have at least one message")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise InvalidRequestError(f"'messages[{i}]' must be an object")
        if not isinstance(message.get("role"), str):
            raise InvalidRequestError(f"'messages[{i}].role' must be a string")
        content = message.get("content")
        if not isinstance(content, str) and not (
            isinstance(content, list) and all(isinstance(block, dict) for block in content)
        ):
            raise InvalidRequestError(f"'messages[{i}].content' must be a string or a list of blocks")
    return tuple(value)


class AnthropicParser:
    """Parser of Anthropic Messages bodies (see the module docstring)."""

    __slots__ = ("name",)

    plugin_type = ANTHROPIC_PARSER_TYPE
    claims = ANTHROPIC_CLAIMS

    def __init__(self, name: str = ANTHROPIC_PARSER_TYPE) -> None:
        self.name = name

    def parse(self, path: str, body: bytes) -> ParsedBody:
        clean = path.split("?", 1)[0]
        if clean.endswith("/messages/count_tokens"):
            return ParsedBody(api=ApiKind.OTHER, model="", usage_reader=NO_USAGE)
        if not clean.endswith("/messages"):
            raise InvalidRequestError(f"unsupported API endpoint: {clean}")
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise json_error(exc, body) from None
        if not isinstance(doc, dict):
            raise InvalidRequestError("request body must be a JSON object")
        messages = _messages(doc.get("messages"))
        model = doc.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidRequestError("'model' is required and must be a non-empty string")
        stream = doc.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise InvalidRequestError("'stream' must be a boolean")
        system = doc.get("system")
        if system is not None and not isinstance(system, (str, list)):
            raise InvalidRequestError("'system' must be a string or a list of blocks")
        max_tokens = doc.get("max_tokens")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0
        ):
            raise InvalidRequestError("'max_tokens' must be a non-negative integer")
        cache_salt = doc.get("cache_salt", "")
        if not isinstance(cache_salt, str):
            raise InvalidRequestError("'cache_salt' must be a string")
        prompt = canonical_json(messages) if system is None else canonical_json([system, *messages])
        return ParsedBody(
            api=api_kind_of(clean),
            model=model,
            prompt_text=prompt,
            messages=messages,
            stream=bool(stream),
            cache_salt=cache_salt,
            max_tokens=max_tokens,
            document=doc,
            usage_reader=_USAGE,
        )

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        return rewrite_document_model(parsed, body, target_model)
