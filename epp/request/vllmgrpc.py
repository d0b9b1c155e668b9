"""``vllmgrpc-parser``: vLLM's gRPC engine API (``vllm.grpc.engine.VllmEngine``) through ext_proc.

The request body is a gRPC frame (see :mod:`epp.request.grpc_frame`) holding one message of
:mod:`epp.request.vllm_engine`. By method (the ``:path`` suffix):

* ``.../VllmEngine/Generate``: a ``GenerateRequest``; ``text`` becomes the prompt text, a
  ``tokenized`` input the JSON text of its ``input_ids``; ``stream`` and
  ``sampling_params.max_tokens`` (when set, 0 included) are read; neither input: 400;
* ``.../VllmEngine/Embed``: an ``EmbedRequest`` whose ``tokenized`` input is required;
* any other path claimed by no one else: forwarded untouched, nothing read from it or its response.

A frame that is short, compressed or truncated, or a message that does not decode, is a 400. The
messages carry no model name: the request's model is empty (``x-gateway-model-name-rewrite`` still
sets the target) and the body is never rewritten.

Response usage: every complete frame of the captured body is decoded as a ``GenerateResponse``
(``chunk`` or ``complete``: ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, kept
when either count is non-zero), failing that as an ``EmbedResponse`` (``prompt_tokens`` when
non-zero); the last frame with usage wins. Total = prompt + completion.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf.message import DecodeError

from epp.request import vllm_engine as pb
from epp.request.errors import InvalidRequestError
from epp.request.grpc_frame import first_message, messages
from epp.request.parser import NO_USAGE, ParsedBody
from scheduler.types import ApiKind, Usage

__all__ = ["VLLMGRPC_CLAIMS", "VLLMGRPC_PARSER_TYPE", "VllmGRPCParser", "VllmGRPCUsage"]

VLLMGRPC_PARSER_TYPE = "vllmgrpc-parser"
_GENERATE = "vllm.grpc.engine.VllmEngine/Generate"
_EMBED = "vllm.grpc.engine.VllmEngine/Embed"
VLLMGRPC_CLAIMS = (_GENERATE, _EMBED)


def _frame_usage(payload: bytes) -> Usage | None:
    try:
        response = pb.GenerateResponse.FromString(payload)
        kind = response.WhichOneof("response")
    except DecodeError:
        kind = None
    if kind is not None:
        part = getattr(response, kind)
        prompt, completion = part.prompt_tokens, part.completion_tokens
        if prompt or completion:
            return Usage(prompt, completion, prompt + completion, part.cached_tokens)
    # An EmbedResponse's packed embedding (field 1) can also decode as a GenerateResponse chunk.
    try:
        embed = pb.EmbedResponse.FromString(payload)
    except DecodeError:
        return None
    if embed.prompt_tokens:
        return Usage(embed.prompt_tokens, 0, embed.prompt_tokens, 0)
    return None


class VllmGRPCUsage:
    """Usage of vLLM gRPC responses (see the module docstring)."""

    __slots__ = ()

    def read(self, body: bytes, streaming: bool) -> Usage | None:
        found: Usage | None = None
        for payload in messages(body):
            usage = _frame_usage(payload)
            if usage is not None:
                found = usage
        return found


_USAGE = VllmGRPCUsage()


def _tokens(ids: Iterable[int]) -> str:
    return "[" + ",".join(str(i) for i in ids) + "]"


class VllmGRPCParser:
    """Parser of vLLM gRPC ``Generate`` / ``Embed`` requests (see the module docstring)."""

    __slots__ = ("name",)

    plugin_type = VLLMGRPC_PARSER_TYPE
    claims = VLLMGRPC_CLAIMS

    def __init__(self, name: str = VLLMGRPC_PARSER_TYPE) -> None:
        self.name = name

    def parse(self, path: str, body: bytes) -> ParsedBody:
        if path.endswith(_EMBED):
            request = _decode(pb.EmbedRequest, body, "EmbedRequest")
            if not request.HasField("tokenized"):
                raise InvalidRequestError("missing tokenized input in EmbedRequest")
            prompt = _tokens(request.tokenized.input_ids)
            return ParsedBody(api=ApiKind.EMBEDDINGS, model="", prompt_text=prompt, usage_reader=_USAGE)
        if path.endswith(_GENERATE):
            request = _decode(pb.GenerateRequest, body, "GenerateRequest")
            kind = request.WhichOneof("input")
            if kind == "text":
                prompt = request.text
            elif kind == "tokenized":
                prompt = _tokens(request.tokenized.input_ids)
            else:
                raise InvalidRequestError("GenerateRequest has no input: set 'text' or 'tokenized'")
            params = request.sampling_params
            max_tokens = params.max_tokens if params.HasField("max_tokens") else None
            return ParsedBody(
                api=ApiKind.COMPLETIONS,
                model="",
                prompt_text=prompt,
                stream=request.stream,
                max_tokens=max_tokens,
                usage_reader=_USAGE,
            )
        return ParsedBody(api=ApiKind.OTHER, model="", usage_reader=NO_USAGE)

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        return body


def _decode(cls: Any, body: bytes, what: str) -> Any:
    try:
        payload = first_message(body)
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"invalid or unsupported gRPC payload: {exc.message}") from None
    try:
        return cls.FromString(payload)
    except DecodeError as exc:
        raise InvalidRequestError(f"unmarshaling {what}: {exc}") from None
