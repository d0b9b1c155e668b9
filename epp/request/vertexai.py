"""``vertexai-parser``: Vertex AI's ``PredictionService`` gRPC methods that wrap an OpenAI JSON body.

The request body is a gRPC frame holding a request message whose ``http_body`` (a
``google.api.HttpBody``, field 2) carries JSON. By method (the ``:path`` suffix):

=======================================  ==========================  ==========================
method suffix                            message                     JSON parsed as (OpenAI)
=======================================  ==========================  ==========================
``PredictionService/ChatCompletions``    ``ChatCompletionsRequest``  ``/chat/completions``
``PredictionService/StreamRawPredict``   ``StreamRawPredictRequest`` ``/responses``
``PredictionService/RawPredict``         ``RawPredictRequest``       ``/responses``
=======================================  ==========================  ==========================

The JSON follows the ``openai-parser`` rules, except that ``model`` may be absent (the wrapped body
is never rewritten). Any other path: forwarded untouched, nothing read from it or its response. A
bad frame, an undecodable message, a message without ``http_body`` or a bad JSON body is a 400.

Response usage: each complete frame of the captured body is decoded as an ``HttpBody`` and its
``data`` read as an OpenAI JSON response (``usage``); the last frame with usage wins.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError

from epp.protocol.usage import usage_from_json
from epp.request.errors import InvalidRequestError
from epp.request.grpc_frame import first_message, messages
from epp.request.openai import OpenAIParser
from epp.request.parser import NO_USAGE, ParsedBody
from epp.request.proto_subset import BYTES, MESSAGE, OPTIONAL, STRING, Field, build
from scheduler.types import ApiKind, Usage

__all__ = ["VERTEXAI_CLAIMS", "VERTEXAI_PARSER_TYPE", "HttpBody", "VertexAIParser", "VertexAIUsage"]

VERTEXAI_PARSER_TYPE = "vertexai-parser"
_AIP = "google.cloud.aiplatform.v1beta1."
_WRAPPER: tuple[list[Field], list[str]] = (
    [
        ("endpoint", 1, OPTIONAL, STRING, "", None, False),
        ("http_body", 2, OPTIONAL, MESSAGE, "google.api.HttpBody", None, False),
    ],
    [],
)
_CLASSES = build(
    "pyepp/vertexai_subset",
    {
        "google.api.HttpBody": (
            [
                ("content_type", 1, OPTIONAL, STRING, "", None, False),
                ("data", 2, OPTIONAL, BYTES, "", None, False),
            ],
            [],
        ),
        _AIP + "ChatCompletionsRequest": _WRAPPER,
        _AIP + "StreamRawPredictRequest": _WRAPPER,
        _AIP + "RawPredictRequest": _WRAPPER,
    },
)
HttpBody: Any = _CLASSES["google.api.HttpBody"]

# method suffix -> (message class, its name, the OpenAI path its JSON is parsed as)
_METHODS: tuple[tuple[str, Any, str, str], ...] = (
    (
        "PredictionService/ChatCompletions",
        _CLASSES[_AIP + "ChatCompletionsRequest"],
        "ChatCompletionsRequest",
        "/chat/completions",
    ),
    (
        "PredictionService/StreamRawPredict",
        _CLASSES[_AIP + "StreamRawPredictRequest"],
        "StreamRawPredictRequest",
        "/responses",
    ),
    ("PredictionService/RawPredict", _CLASSES[_AIP + "RawPredictRequest"], "RawPredictRequest", "/responses"),
)
VERTEXAI_CLAIMS = tuple(method for method, _, _, _ in _METHODS)


class VertexAIUsage:
    """Usage of Vertex AI ``HttpBody`` responses (see the module docstring)."""

    __slots__ = ()

    def read(self, body: bytes, streaming: bool) -> Usage | None:
        found: Usage | None = None
        for payload in messages(body):
            try:
                data = HttpBody.FromString(payload).data
            except DecodeError:
                continue
            usage = usage_from_json(data)
            if usage is not None:
                found = usage
        return found


_USAGE = VertexAIUsage()


class VertexAIParser:
    """Parser of Vertex AI gRPC requests wrapping OpenAI JSON (see the module docstring)."""

    __slots__ = ("_openai", "name")

    plugin_type = VERTEXAI_PARSER_TYPE
    claims = VERTEXAI_CLAIMS

    def __init__(self, name: str = VERTEXAI_PARSER_TYPE) -> None:
        self.name = name
        self._openai = OpenAIParser()

    def parse(self, path: str, body: bytes) -> ParsedBody:
        for method, cls, what, openai_path in _METHODS:
            if path.endswith(method):
                return self._parse(body, cls, what, openai_path)
        return ParsedBody(api=ApiKind.OTHER, model="", usage_reader=NO_USAGE)

    def _parse(self, body: bytes, cls: Any, what: str, openai_path: str) -> ParsedBody:
        try:
            payload = first_message(body)
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"invalid or unsupported gRPC payload: {exc.message}") from None
        try:
            request = cls.FromString(payload)
        except DecodeError as exc:
            raise InvalidRequestError(f"unmarshaling {what}: {exc}") from None
        if not request.HasField("http_body"):
            raise InvalidRequestError(f"{what} has no HttpBody")
        try:
            parsed = self._openai.parse_json(openai_path, request.http_body.data, require_model=False)
        except InvalidRequestError as exc:
            raise InvalidRequestError(f"parsing {what}: {exc.message}") from None
        return ParsedBody(
            api=parsed.api,
            model=parsed.model,
            prompt_text=parsed.prompt_text,
            messages=parsed.messages,
            stream=parsed.stream,
            cache_salt=parsed.cache_salt,
            max_tokens=parsed.max_tokens,
            usage_reader=_USAGE,
        )

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        return body
