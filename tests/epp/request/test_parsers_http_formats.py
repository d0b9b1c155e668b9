"""Anthropic, vLLM HTTP ``/inference/v1/generate`` and SGLang ``/generate`` parsers: requests and
response usage. Cases ported from llm-d-router's anthropic_test.go, vllmhttp_test.go and
sglanghttp_test.go."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from epp.request import InvalidRequestError
from epp.request.anthropic import AnthropicParser, AnthropicUsage
from epp.request.chain import ParserChain
from epp.request.openai import OpenAIParser
from epp.request.parser import NO_USAGE
from epp.request.sglang import SGLangHTTPParser, SGLangUsage
from epp.request.vllmhttp import VllmHTTPParser
from scheduler.types import ApiKind, Usage

A = AnthropicParser()
V = VllmHTTPParser()
S = SGLangHTTPParser()


def body(obj: Any) -> bytes:
    return orjson.dumps(obj)


HELLO = [{"role": "user", "content": "Hello"}]

# ------------------------------------------------------------------------------------ anthropic


@pytest.mark.parametrize(
    "doc, stream, salt, max_tokens",
    [
        ({"model": "claude-sonnet-4-6", "max_tokens": 1024, "messages": HELLO}, False, "", 1024),
        (
            {
                "model": "claude-sonnet-4-6",
                "max_tokens": 1024,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
            },
            False,
            "",
            1024,
        ),
        ({"model": "c", "max_tokens": 1024, "system": "be brief", "messages": HELLO}, False, "", 1024),
        (
            {"model": "c", "system": [{"type": "text", "text": "be brief"}], "messages": HELLO},
            False,
            "",
            None,
        ),
        ({"model": "c", "messages": HELLO, "tools": [{"name": "get_weather"}]}, False, "", None),
        ({"model": "c", "max_tokens": 1024, "stream": True, "messages": HELLO}, True, "", 1024),
        (
            {"model": "c", "max_tokens": 1024, "cache_salt": "test-salt-123", "messages": HELLO},
            False,
            "test-salt-123",
            1024,
        ),
    ],
)
def test_anthropic_messages(doc: dict[str, Any], stream: bool, salt: str, max_tokens: int | None) -> None:
    parsed = A.parse("/v1/messages", body(doc))
    assert parsed.model == doc["model"] and parsed.stream is stream and parsed.cache_salt == salt
    assert parsed.max_tokens == max_tokens and parsed.messages == tuple(doc["messages"])
    assert '"Hello"' in parsed.prompt_text
    if "system" in doc:
        assert "be brief" in parsed.prompt_text
    assert parsed.usage_reader is not None and parsed.api is ApiKind.OTHER


@pytest.mark.parametrize(
    "path, raw, fragment",
    [
        ("/v1/messages", body({"model": "c", "messages": []}), "at least one message"),
        ("/v1/messages", body({"model": "c"}), "at least one message"),
        ("/v1/messages", b"", "is empty"),
        ("/v1/messages", b"[]", "JSON object"),
        ("/v1/chat/completions", body({"model": "c", "messages": HELLO}), "unsupported API endpoint"),
        ("/v1/completions", body({"model": "c", "messages": HELLO}), "unsupported API endpoint"),
        ("/v1/messages", body({"messages": HELLO}), "'model'"),
        ("/v1/messages", body({"model": "c", "messages": [{"content": "x"}]}), "messages[0].role"),
        (
            "/v1/messages",
            body({"model": "c", "messages": [{"role": "user", "content": 3}]}),
            "messages[0].content",
        ),
        ("/v1/messages", body({"model": "c", "messages": HELLO, "stream": "yes"}), "'stream'"),
        ("/v1/messages", body({"model": "c", "messages": HELLO, "max_tokens": -1}), "'max_tokens'"),
    ],
)
def test_anthropic_bad_requests(path: str, raw: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        A.parse(path, raw)
    assert fragment in info.value.message and info.value.status == 400


def test_anthropic_count_tokens_is_forwarded_unread() -> None:
    parsed = A.parse("/v1/messages/count_tokens", b"not even json")
    assert parsed.model == "" and parsed.usage_reader is NO_USAGE and parsed.document is None


def test_anthropic_model_rewrite() -> None:
    parsed = A.parse("/v1/messages", body({"model": "c", "messages": HELLO}))
    assert orjson.loads(A.rewrite_model(parsed, b"", "c2"))["model"] == "c2"


@pytest.mark.parametrize(
    "raw, want",
    [
        (b'{"id":"msg","usage":{"input_tokens":25,"output_tokens":15}}', Usage(25, 15, 40, 0)),
        (
            b'{"usage":{"input_tokens":100,"output_tokens":50,"cache_read_input_tokens":80}}',
            Usage(100, 50, 150, 80),
        ),
        (b'{"id": "msg_123", "type": "message"}', None),
        (b"{malformed", None),
        (b"", None),
    ],
)
def test_anthropic_json_usage(raw: bytes, want: Usage | None) -> None:
    assert AnthropicUsage().read(raw, False) == want


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


START = event(
    "message_start", {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 25}}}
)
DELTA = event(
    "message_delta",
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 15}},
)
TEXT = event(
    "content_block_delta",
    {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "usage"}},
)
CACHED_START = event(
    "message_start",
    {"type": "message_start", "message": {"usage": {"input_tokens": 100, "cache_read_input_tokens": 80}}},
)


@pytest.mark.parametrize(
    "raw, want",
    [
        (START, Usage(25, 0, 25, 0)),
        (DELTA, Usage(0, 15, 15, 0)),
        (START + TEXT + DELTA, Usage(25, 15, 40, 0)),
        (
            CACHED_START + event("message_delta", {"type": "message_delta", "usage": {"output_tokens": 50}}),
            Usage(100, 50, 150, 80),
        ),
        (TEXT, None),
        (b'event: message_stop\ndata: {"type":"message_stop"}\n\n', None),
    ],
)
def test_anthropic_sse_usage(raw: bytes, want: Usage | None) -> None:
    assert AnthropicUsage().read(raw, True) == want


# ------------------------------------------------------------------------------------ vllmhttp


@pytest.mark.parametrize(
    "doc, prompt, salt, max_tokens, stream",
    [
        ({"token_ids": [1, 2, 3]}, "[1,2,3]", "", None, False),
        ({"token_ids": [1, 2, 3], "cache_salt": "salt"}, "[1,2,3]", "salt", None, False),
        (
            {"token_ids": [1, 2], "sampling_params": {"max_tokens": 64, "temperature": 0.5}},
            "[1,2]",
            "",
            64,
            False,
        ),
        ({"token_ids": [1, 2], "sampling_params": {"temperature": 0.5}}, "[1,2]", "", None, False),
        ({"token_ids": [7], "stream": True, "model": "llama"}, "[7]", "", None, True),
        ({"token_ids": [7], "features": {"mm_hashes": {"image": ["h"]}}}, "[7]", "", None, False),
    ],
)
def test_vllmhttp_generate(
    doc: dict[str, Any], prompt: str, salt: str, max_tokens: int | None, stream: bool
) -> None:
    parsed = V.parse("/inference/v1/generate", body(doc))
    assert (parsed.prompt_text, parsed.cache_salt, parsed.max_tokens, parsed.stream) == (
        prompt,
        salt,
        max_tokens,
        stream,
    )
    assert parsed.model == doc.get("model", "") and parsed.usage_reader is None


@pytest.mark.parametrize(
    "path, raw, fragment",
    [
        ("/inference/v1/generate", body({"sampling_params": {}}), "non-empty token_ids"),
        ("/inference/v1/generate", b'{"token_ids":[]}', "must have non-empty token_ids field"),
        ("/inference/v1/generate", b'{"token_ids":[1,2,-1]}', "token_ids"),
        ("/inference/v1/generate", b'{"token_ids":[4294967296]}', "token_ids"),
        ("/inference/v1/generate", b"nope", "not valid JSON"),
        ("/v1/completions", b'{"token_ids":[1]}', "unsupported path"),
    ],
)
def test_vllmhttp_bad_requests(path: str, raw: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        V.parse(path, raw)
    assert fragment in info.value.message


def test_vllmhttp_with_openai_serves_both_surfaces() -> None:
    chain = ParserChain([V, OpenAIParser()])
    assert chain.parse("/inference/v1/generate", b'{"token_ids":[1]}').prompt_text == "[1]"
    assert chain.parse("/v1/completions", b'{"model":"m","prompt":"p"}').prompt_text == "p"


# ------------------------------------------------------------------------------------ sglang


@pytest.mark.parametrize(
    "doc, salt, max_tokens, stream",
    [
        ({"input_ids": [1, 2, 3]}, "", None, False),
        ({"input_ids": [10, 20], "extra_key": "salt-abc"}, "salt-abc", None, False),
        ({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 256}}, "", 256, False),
        ({"input_ids": [1, 2, 3], "stream": True}, "", None, True),
        ({"text": "ignored by the parser", "input_ids": [7, 8]}, "", None, False),
    ],
)
def test_sglang_generate(doc: dict[str, Any], salt: str, max_tokens: int | None, stream: bool) -> None:
    parsed = S.parse("/generate", body(doc))
    assert parsed.prompt_text == orjson.dumps(doc["input_ids"]).decode() and parsed.model == ""
    assert (parsed.cache_salt, parsed.max_tokens, parsed.stream) == (salt, max_tokens, stream)
    assert S.rewrite_model(parsed, b"x", "m") == b"x"


@pytest.mark.parametrize(
    "path, raw, fragment",
    [
        ("/generate", b'{"input_ids":[1,2,-1]}', "input_ids must be an array of uint32 integers"),
        ("/generate", b'{"input_ids":[1,2.5]}', "input_ids must be an array of uint32 integers"),
        ("/generate", b'{"input_ids":[4294967296]}', "input_ids must be an array of uint32 integers"),
        ("/generate", b'{"input_ids":[]}', "input_ids cannot be empty"),
        ("/generate", b'{"input_embeds":[[0.1,0.2]]}', "input_ids must be provided"),
        ("/generate", b'{"text":"hello"}', "input_ids must be provided"),
        ("/generate", b'{"input_ids":[[1,2],[3,4]]}', "input_ids must be an array of uint32 integers"),
        ("/generate", b'{"input_ids":[1,2],"extra_key":["a","b"]}', "extra_key must be a string"),
        ("/generate", b"{", "generate request body is not valid JSON"),
        ("/v1/completions", b'{"input_ids":[1]}', "unsupported path"),
    ],
)
def test_sglang_bad_requests(path: str, raw: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        S.parse(path, raw)
    assert fragment in info.value.message


@pytest.mark.parametrize(
    "raw, streaming, want",
    [
        (
            b'{"text":"hello","meta_info":{"prompt_tokens":10,"completion_tokens":5}}',
            False,
            Usage(10, 5, 15, 0),
        ),
        (
            b'{"text":"hi","meta_info":{"id":"r","prompt_tokens":8,"completion_tokens":3,"cached_tokens":2}}',
            False,
            Usage(8, 3, 11, 2),
        ),
        (b'{"text":"hi"}', False, None),
        (
            b'data: {"text":"he","meta_info":{"prompt_tokens":10,"completion_tokens":2}}\n\n'
            b'data: {"text":"hello","meta_info":{"prompt_tokens":10,"completion_tokens":5,'
            b'"finish_reason":{"type":"stop"}}}\n\ndata: [DONE]\n\n',
            True,
            Usage(10, 5, 15, 0),
        ),
        (b'data: {"text":"he","meta_info":{"prompt_tokens":10,"completion_tokens":2}}\n\n', True, None),
    ],
)
def test_sglang_usage(raw: bytes, streaming: bool, want: Usage | None) -> None:
    assert SGLangUsage().read(raw, streaming) == want
