"""OpenAI/vLLM request parsing and error bodies (no I/O).

:func:`parse_generation` validates a ``/v1/completions`` or ``/v1/chat/completions`` body into a frozen
:class:`GenerationRequest`; :func:`prompt_token_lists` reads a completions ``prompt`` (string, list of
strings, list of ids, list of id lists). Unknown fields are ignored (routers add their own). Invalid
input raises :class:`ApiError` carrying the HTTP status; :func:`error_body` renders vLLM's (OpenAI's)
error shape ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from scheduler.chat_render import ChatTemplateError, chat_args
from simulator.tokenizer import Tokenizer

__all__ = [
    "ApiError",
    "GenerationRequest",
    "chat_token_ids",
    "error_body",
    "parse_generation",
    "parse_json",
    "prompt_token_lists",
    "require_model",
]

_ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                429: "RateLimitError", 503: "ServiceUnavailableError"}  # fmt: skip


class ApiError(Exception):
    """A request error with its HTTP status and OpenAI error type."""

    def __init__(self, status: int, message: str, error_type: str | None = None, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type or _ERROR_TYPES.get(status, "InternalServerError")
        self.param = param


def error_body(status: int, message: str, error_type: str | None = None, param: str | None = None) -> bytes:
    err = {
        "message": message,
        "type": error_type or _ERROR_TYPES.get(status, "InternalServerError"),
        "param": param,
        "code": status,
    }
    return orjson.dumps({"error": err})


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A validated completion/chat request."""

    model: str
    prompt_ids: list[int]
    max_tokens: int | None
    ignore_eos: bool
    stream: bool
    include_usage: bool
    chat: bool


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def require_model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required and must be a non-empty string", param="model")
    return model


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def prompt_token_lists(prompt: Any, tokenizer: Tokenizer, field: str = "prompt") -> list[list[int]]:
    """Tokenise a completions prompt into one id list per prompt."""
    if isinstance(prompt, str):
        return [tokenizer.encode_prompt(prompt)]
    if isinstance(prompt, list) and prompt:
        if _is_ids(prompt):
            return [list(prompt)]
        if all(isinstance(p, str) for p in prompt):
            return [tokenizer.encode_prompt(p) for p in prompt]
        if all(_is_ids(p) for p in prompt):
            return [list(p) for p in prompt]
    raise ApiError(
        400,
        f"'{field}' must be a string, a list of strings, or a list of token ids (or lists of them)",
        param=field,
    )


def chat_token_ids(body: Mapping[str, Any], tokenizer: Tokenizer) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "'messages' must be a non-empty list of message objects", param="messages")
    try:
        args = chat_args(body)
    except ChatTemplateError as exc:
        raise ApiError(400, str(exc)) from None
    try:
        text = tokenizer.render_chat(messages, args)
    except ChatTemplateError as exc:
        raise ApiError(400, str(exc), param="messages") from None
    return tokenizer.encode(text)


def _optional_int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ApiError(400, f"'{name}' must be an integer >= 1, got {value!r}", param=name)
    return value


def parse_generation(body: Mapping[str, Any], tokenizer: Tokenizer, chat: bool) -> GenerationRequest:
    model = require_model(body)
    if chat:
        prompt_ids = chat_token_ids(body, tokenizer)
        max_tokens = _optional_int(body, "max_completion_tokens") or _optional_int(body, "max_tokens")
    else:
        if "prompt" not in body:
            raise ApiError(400, "'prompt' is required", param="prompt")
        prompt_ids = [t for ids in prompt_token_lists(body["prompt"], tokenizer) for t in ids]
        if not prompt_ids:
            raise ApiError(400, "The prompt cannot be empty.", param="prompt")
        max_tokens = _optional_int(body, "max_tokens")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ApiError(400, "'ignore_eos' must be a boolean", param="ignore_eos")
    return GenerationRequest(
        model=model,
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        chat=chat,
    )
