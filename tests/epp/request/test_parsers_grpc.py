"""gRPC framing, ``vllmgrpc-parser`` and ``vertexai-parser``: requests and response usage. Cases
ported from llm-d-router's util/grpc_test.go, vllmgrpc_test.go and vertexai_test.go."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from epp.request import InvalidRequestError
from epp.request import vllm_engine as pb
from epp.request.grpc_frame import first_message, frame, messages
from epp.request.parser import NO_USAGE
from epp.request.vertexai import _CLASSES, HttpBody, VertexAIParser, VertexAIUsage
from epp.request.vllmgrpc import VllmGRPCParser, VllmGRPCUsage
from scheduler.types import ApiKind, Usage

GENERATE = "/vllm.grpc.engine.VllmEngine/Generate"
EMBED = "/vllm.grpc.engine.VllmEngine/Embed"
G = VllmGRPCParser()
VX = VertexAIParser()
AIP = "google.cloud.aiplatform.v1beta1."


# ------------------------------------------------------------------------------------ framing


@pytest.mark.parametrize(
    "data, error",
    [
        (bytes([0, 0, 0, 0]), "invalid gRPC frame: expected at least 5 bytes for header, got 4"),
        (bytes([1, 0, 0, 0, 0]), "compressed gRPC payload is not supported"),
        (
            bytes([0, 0, 0, 0, 10]) + b"hello",
            "incomplete gRPC payload: header indicates 10 bytes, but only 5 bytes are available",
        ),
        (
            bytes([0, 0xFF, 0xFF, 0xFF, 0xFF, 0xAA, 0xBB, 0xCC, 0xDD]),
            "incomplete gRPC payload: header indicates 4294967295 bytes, but only 4 bytes are available",
        ),
    ],
)
def test_bad_frames(data: bytes, error: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        first_message(data)
    assert info.value.message == error and info.value.status == 400


def test_frames_round_trip() -> None:
    assert first_message(frame(b"hello")) == b"hello"
    assert first_message(frame(b"hello") + b"trailing") == b"hello"
    assert list(messages(frame(b"a") + frame(b"") + frame(b"bc") + b"\x00\x00")) == [b"a", b"", b"bc"]
    assert list(messages(b"\x07garbage")) == []


# ------------------------------------------------------------------------------------ vllmgrpc


def generate(**fields: Any) -> bytes:
    return frame(pb.GenerateRequest(**fields).SerializeToString())


@pytest.mark.parametrize(
    "raw, prompt, stream, max_tokens",
    [
        (generate(request_id="r", text="Hello"), "Hello", False, None),
        (
            generate(tokenized=pb.TokenizedInput(original_text="Hi", input_ids=[1, 2, 3])),
            "[1,2,3]",
            False,
            None,
        ),
        (
            generate(
                tokenized=pb.TokenizedInput(input_ids=[4, 5]),
                mm_inputs=pb.MultimodalInputs(mm_hashes=["h1"]),
            ),
            "[4,5]",
            False,
            None,
        ),
        (generate(text="Hello", stream=True), "Hello", True, None),
        (generate(text="Hello", sampling_params=pb.SamplingParams(max_tokens=256)), "Hello", False, 256),
        (
            generate(tokenized=pb.TokenizedInput(input_ids=[1]), sampling_params={"max_tokens": 128}),
            "[1]",
            False,
            128,
        ),
        (generate(text="Hello", sampling_params=pb.SamplingParams()), "Hello", False, None),
        (generate(text="Hello", sampling_params=pb.SamplingParams(max_tokens=0)), "Hello", False, 0),
    ],
)
def test_vllmgrpc_generate(raw: bytes, prompt: str, stream: bool, max_tokens: int | None) -> None:
    parsed = G.parse(GENERATE, raw)
    assert (parsed.prompt_text, parsed.stream, parsed.max_tokens) == (prompt, stream, max_tokens)
    assert parsed.model == "" and parsed.api is ApiKind.COMPLETIONS
    assert G.rewrite_model(parsed, raw, "m") is raw


def test_vllmgrpc_embed() -> None:
    raw = frame(pb.EmbedRequest(tokenized=pb.TokenizedInput(input_ids=[7, 8, 9])).SerializeToString())
    parsed = G.parse(EMBED, raw)
    assert parsed.prompt_text == "[7,8,9]" and parsed.api is ApiKind.EMBEDDINGS


def test_vllmgrpc_unclaimed_method_is_forwarded_unread() -> None:
    parsed = G.parse("/vllm.grpc.engine.VllmEngine/HealthCheck", b"\x00\x00")
    assert parsed.usage_reader is NO_USAGE and parsed.model == ""


@pytest.mark.parametrize(
    "path, raw, fragment",
    [
        (GENERATE, b"\x00\x00", "invalid or unsupported gRPC payload"),
        (GENERATE, frame(b"x")[:0] + b"\x01\x00\x00\x00\x00", "compressed"),
        (GENERATE, frame(b""), "no input"),
        (GENERATE, frame(b"\xff"), "unmarshaling GenerateRequest"),
        (EMBED, frame(pb.EmbedRequest(request_id="r").SerializeToString()), "missing tokenized input"),
        (EMBED, frame(b"\xff"), "unmarshaling EmbedRequest"),
    ],
)
def test_vllmgrpc_bad_requests(path: str, raw: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        G.parse(path, raw)
    assert fragment in info.value.message


def response(**fields: Any) -> bytes:
    return frame(pb.GenerateResponse(**fields).SerializeToString())


@pytest.mark.parametrize(
    "raw, want",
    [
        (
            response(
                chunk=pb.GenerateStreamChunk(
                    token_ids=[1], prompt_tokens=10, completion_tokens=5, cached_tokens=2
                )
            ),
            Usage(10, 5, 15, 2),
        ),
        (
            response(
                complete=pb.GenerateComplete(
                    finish_reason="stop", prompt_tokens=20, completion_tokens=15, cached_tokens=5
                )
            ),
            Usage(20, 15, 35, 5),
        ),
        (response(chunk=pb.GenerateStreamChunk(token_ids=[1, 2])), None),
        (
            frame(pb.EmbedResponse(embedding=[0.1, 0.2], prompt_tokens=10).SerializeToString()),
            Usage(10, 0, 10, 0),
        ),
        (
            response(chunk=pb.GenerateStreamChunk(token_ids=[1]))
            + response(chunk=pb.GenerateStreamChunk(token_ids=[2]))
            + response(complete=pb.GenerateComplete(prompt_tokens=3, completion_tokens=2)),
            Usage(3, 2, 5, 0),
        ),
        (b"", None),
        (b"\x00\x00\x00", None),
    ],
)
def test_vllmgrpc_usage(raw: bytes, want: Usage | None) -> None:
    assert VllmGRPCUsage().read(raw, False) == want


# ------------------------------------------------------------------------------------ vertexai


def vertex(kind: str, data: bytes) -> bytes:
    return frame(_CLASSES[AIP + kind](http_body=HttpBody(data=data)).SerializeToString())


CHAT = b'{"messages":[{"role":"user","content":"Hello"}],"stream":true}'


def test_vertex_chat_completions() -> None:
    parsed = VX.parse(f"/{AIP}PredictionService/ChatCompletions", vertex("ChatCompletionsRequest", CHAT))
    assert parsed.api is ApiKind.CHAT_COMPLETIONS and parsed.stream and parsed.model == ""
    assert parsed.messages == ({"role": "user", "content": "Hello"},)


@pytest.mark.parametrize(
    "method, kind, text",
    [
        ("StreamRawPredict", "StreamRawPredictRequest", "Hello from stream raw predict"),
        ("RawPredict", "RawPredictRequest", "Hello from raw predict"),
    ],
)
def test_vertex_raw_predict_reads_responses_json(method: str, kind: str, text: str) -> None:
    raw = vertex(kind, orjson.dumps({"input": text, "model": "gemini"}))
    parsed = VX.parse(f"/google.cloud.aiplatform.v1.PredictionService/{method}", raw)
    assert parsed.api is ApiKind.RESPONSES and parsed.prompt_text == text and parsed.model == "gemini"
    assert VX.rewrite_model(parsed, raw, "other") is raw


def test_vertex_unclaimed_path_is_forwarded_unread() -> None:
    assert VX.parse("/unsupported/path", b"").usage_reader is NO_USAGE


@pytest.mark.parametrize(
    "method, raw, fragment",
    [
        ("ChatCompletions", bytes([0, 0, 0, 0]), "invalid gRPC frame"),
        ("ChatCompletions", bytes([0, 0, 0, 0, 1, 0xFF]), "unmarshaling ChatCompletionsRequest"),
        ("StreamRawPredict", bytes([0, 0, 0, 0, 1, 0xFF]), "unmarshaling StreamRawPredictRequest"),
        ("RawPredict", bytes([0, 0, 0, 0, 1, 0xFF]), "unmarshaling RawPredictRequest"),
        ("ChatCompletions", frame(b""), "ChatCompletionsRequest has no HttpBody"),
        ("ChatCompletions", vertex("ChatCompletionsRequest", b"not json"), "parsing ChatCompletionsRequest"),
        ("ChatCompletions", vertex("ChatCompletionsRequest", b'{"messages":[]}'), "'messages'"),
        ("RawPredict", vertex("RawPredictRequest", b"{}"), "'input'"),
    ],
)
def test_vertex_bad_requests(method: str, raw: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        VX.parse(f"/{AIP}PredictionService/{method}", raw)
    assert fragment in info.value.message


def test_vertex_usage_from_http_body_frames() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    body = frame(HttpBody(data=b'{"choices":[]}').SerializeToString()) + frame(
        HttpBody(data=orjson.dumps({"usage": usage})).SerializeToString()
    )
    assert VertexAIUsage().read(body, False) == Usage(10, 5, 15, 0)
    assert VertexAIUsage().read(b"", False) is None
