"""Parser for OpenAI-compatible bodies (completions, chat, embeddings, responses, conversations).

Rules (every violation is an HTTP 400 naming the field):

* the body is a JSON object (decoded once with orjson);
* ``model`` is a non-empty string; required except for ``/v1/conversations`` (which has no model in
  the OpenAI API) and unknown paths, where it is optional (``""`` when absent);
* ``stream`` is a boolean when present; ``cache_salt`` a string; ``max_tokens`` /
  ``max_completion_tokens`` / ``max_output_tokens`` a non-negative integer;
* completions: ``prompt`` is a string, a non-empty list of strings, a non-empty list of token ids or
  a non-empty list of token-id lists;
* chat: ``messages`` is a non-empty list of objects, each with a string ``role`` and a ``content``
  that is a string, a list of part objects or null;
* embeddings: ``input`` as a completions prompt; responses: ``input`` a string or a list of item
  objects; conversations: ``items`` (optional) a list of objects; images (``/images/generations``):
  ``prompt`` a non-empty string. ``/chat/completions/render`` and ``/completions/render`` are read
  as their parent API.

As the ``openai-parser`` plugin it claims the suffixes of :data:`OPENAI_CLAIMS`. Response usage is
the OpenAI ``usage`` object (see :mod:`epp.protocol.usage`).

``prompt_text`` for prefix hashing: the prompt string; a list of strings joined with ``"\\n"``;
token lists as their JSON text; chat messages, response items and conversation items as a
canonical JSON serialisation (keys sorted, no whitespace), so it is stable under key order and a
conversation's serialisation is a prefix of its continuation's (up to the closing bracket).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from epp.request.errors import InvalidRequestError, json_error
from epp.request.parser import ParsedBody, api_kind_of
from scheduler.types import ApiKind

__all__ = ["OPENAI_CLAIMS", "OPENAI_PARSER_TYPE", "OpenAIParser", "canonical_json"]

OPENAI_PARSER_TYPE = "openai-parser"
OPENAI_CLAIMS = (
    "chat/completions",
    "completions",
    "embeddings",
    "responses",
    "conversations",
    "chat/completions/render",
    "completions/render",
    "images/generations",
)
_IMAGES = "/images/generations"
_MAX_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def canonical_json(value: Any) -> str:
    """Key-order-independent compact JSON text of ``value``."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _prompt_text(value: Any, field: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise InvalidRequestError(
            f"'{field}' must be a string, a non-empty list of strings or a non-empty list of token ids"
        )
    first = value[0]
    if isinstance(first, str):
        if not all(isinstance(v, str) for v in value):
            raise InvalidRequestError(f"'{field}' must be a list of strings only")
        return "\n".join(value)
    if isinstance(first, int) and not isinstance(first, bool):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise InvalidRequestError(f"'{field}' token list must contain integers only")
        return orjson.dumps(value).decode()
    if isinstance(first, list):
        for i, item in enumerate(value):
            if (
                not isinstance(item, list)
                or not item
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
            ):
                raise InvalidRequestError(f"'{field}[{i}]' must be a non-empty list of token ids")
        return orjson.dumps(value).decode()
    raise InvalidRequestError(f"'{field}' must be a string, a list of strings or a list of token ids")


def _valid_content(content: Any) -> bool:
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(isinstance(p, dict) for p in content)


def _messages(value: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not value:
        raise InvalidRequestError("'messages' must be a non-empty list")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise InvalidRequestError(f"'messages[{i}]' must be an object")
        if not isinstance(message.get("role"), str):
            raise InvalidRequestError(f"'messages[{i}].role' must be a string")
        if not _valid_content(message.get("content")):
            raise InvalidRequestError(f"'messages[{i}].content' must be a string, a list of parts or null")
    return tuple(value)


def _object_list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise InvalidRequestError(f"'{field}' must be a list of objects")
    return value


def _responses_prompt(doc: Mapping[str, Any]) -> str:
    value = doc.get("input")
    instructions = doc.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequestError("'instructions' must be a string")
    if isinstance(value, str):
        text = value
    elif value is None:
        raise InvalidRequestError("'input' is required")
    else:
        text = canonical_json(_object_list(value, "input"))
    return f"{instructions}\n{text}" if instructions else text


def _max_tokens(doc: Mapping[str, Any]) -> int | None:
    for field in _MAX_TOKEN_FIELDS:
        value = doc.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidRequestError(f"'{field}' must be a non-negative integer")
        return value
    return None


def _images(doc: dict[str, Any]) -> ParsedBody:
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequestError("'model' is required and must be a non-empty string")
    prompt = doc.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise InvalidRequestError("'prompt' is required and must be a non-empty string")
    stream = doc.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequestError("'stream' must be a boolean")
    return ParsedBody(api=ApiKind.OTHER, model=model, prompt_text=prompt, stream=bool(stream), document=doc)


def _decode(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise json_error(exc, body) from None
    if not isinstance(doc, dict):
        raise InvalidRequestError("request body must be a JSON object")
    return doc


class OpenAIParser:
    """Parser for OpenAI-compatible JSON bodies (see the module docstring for the rules)."""

    __slots__ = ("name",)

    plugin_type = OPENAI_PARSER_TYPE
    claims = OPENAI_CLAIMS

    def __init__(self, name: str = OPENAI_PARSER_TYPE) -> None:
        self.name = name

    def parse(self, path: str, body: bytes) -> ParsedBody:
        return self.parse_json(path, body)

    def parse_json(self, path: str, body: bytes, *, require_model: bool = True) -> ParsedBody:
        """:meth:`parse`; ``require_model=False`` lets ``model`` be absent on every API (for bodies
        wrapped in a message that is never rewritten, as Vertex AI's)."""
        clean = path.split("?", 1)[0].rstrip("/")
        if clean.endswith("/render"):
            clean = clean[: -len("/render")]
        api = api_kind_of(clean)
        doc = _decode(body)
        if api is ApiKind.OTHER and clean.endswith(_IMAGES):
            return _images(doc)
        model = doc.get("model")
        if model is None and (not require_model or api in (ApiKind.CONVERSATIONS, ApiKind.OTHER)):
            model = ""
        elif not isinstance(model, str) or not model:
            raise InvalidRequestError("'model' is required and must be a non-empty string")
        stream = doc.get("stream", False)
        if stream is None:
            stream = False
        if not isinstance(stream, bool):
            raise InvalidRequestError("'stream' must be a boolean")
        cache_salt = doc.get("cache_salt", "")
        if not isinstance(cache_salt, str):
            raise InvalidRequestError("'cache_salt' must be a string")
        messages: tuple[Mapping[str, Any], ...] | None = None
        if api is ApiKind.CHAT_COMPLETIONS:
            messages = _messages(doc.get("messages"))
            prompt = canonical_json(messages)
        elif api is ApiKind.COMPLETIONS:
            if "prompt" not in doc:
                raise InvalidRequestError("'prompt' is required")
            prompt = _prompt_text(doc["prompt"], "prompt")
        elif api is ApiKind.EMBEDDINGS:
            if "input" not in doc:
                raise InvalidRequestError("'input' is required")
            prompt = _prompt_text(doc["input"], "input")
        elif api is ApiKind.RESPONSES:
            prompt = _responses_prompt(doc)
        elif api is ApiKind.CONVERSATIONS:
            items = doc.get("items")
            prompt = "" if items is None else canonical_json(_object_list(items, "items"))
        else:
            prompt = ""
        return ParsedBody(
            api=api,
            model=model,
            prompt_text=prompt,
            messages=messages,
            stream=stream,
            cache_salt=cache_salt,
            max_tokens=_max_tokens(doc),
            document=doc,
        )

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        doc = dict(parsed.document) if parsed.document is not None else _decode(body)
        doc["model"] = target_model
        return orjson.dumps(doc)
