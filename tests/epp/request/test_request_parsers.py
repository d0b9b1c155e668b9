"""Table-driven tests of the OpenAI and passthrough request parsers and the LLMRequest builder."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from epp.request import (
    InvalidRequestError,
    OpenAIParser,
    PassthroughParser,
    api_kind_of,
    build_request,
    canonical_json,
)
from scheduler.types import ApiKind

P = OpenAIParser()


@pytest.mark.parametrize(
    "path, kind",
    [
        ("/v1/completions", ApiKind.COMPLETIONS),
        ("/v1/chat/completions", ApiKind.CHAT_COMPLETIONS),
        ("/v1/chat/completions?x=1", ApiKind.CHAT_COMPLETIONS),
        ("/openai/v1/chat/completions/", ApiKind.CHAT_COMPLETIONS),
        ("/v1/embeddings", ApiKind.EMBEDDINGS),
        ("/v1/responses", ApiKind.RESPONSES),
        ("/v1/conversations", ApiKind.CONVERSATIONS),
        ("/v1/models", ApiKind.OTHER),
        ("", ApiKind.OTHER),
    ],
)
def test_api_kind_by_path_suffix(path: str, kind: ApiKind) -> None:
    assert api_kind_of(path) is kind


@pytest.mark.parametrize(
    "path, doc, prompt",
    [
        ("/v1/completions", {"model": "m", "prompt": "hello"}, "hello"),
        ("/v1/completions", {"model": "m", "prompt": ["a", "b"]}, "a\nb"),
        ("/v1/completions", {"model": "m", "prompt": [1, 2, 3]}, "[1,2,3]"),
        ("/v1/completions", {"model": "m", "prompt": [[1, 2], [3]]}, "[[1,2],[3]]"),
        ("/v1/embeddings", {"model": "m", "input": "text"}, "text"),
        ("/v1/embeddings", {"model": "m", "input": ["x", "y"]}, "x\ny"),
        ("/v1/responses", {"model": "m", "input": "hi"}, "hi"),
        ("/v1/responses", {"model": "m", "input": "hi", "instructions": "be brief"}, "be brief\nhi"),
        (
            "/v1/responses",
            {"model": "m", "input": [{"role": "user", "content": "q"}]},
            '[{"content":"q","role":"user"}]',
        ),
        ("/v1/conversations", {"items": [{"type": "message", "b": 1}]}, '[{"b":1,"type":"message"}]'),
        ("/v1/conversations", {}, ""),
        ("/v1/models", {"anything": True}, ""),
    ],
)
def test_prompt_text(path: str, doc: dict[str, Any], prompt: str) -> None:
    assert P.parse(path, orjson.dumps(doc)).prompt_text == prompt


def test_chat_prompt_is_canonical_and_stable_under_key_order() -> None:
    a = b'{"model":"m","messages":[{"role":"user","content":"hi","name":"x"}]}'
    b = b'{"messages":[{"name":"x","content":"hi","role":"user"}],"model":"m"}'
    pa, pb = P.parse("/v1/chat/completions", a), P.parse("/v1/chat/completions", b)
    assert pa.prompt_text == pb.prompt_text == '[{"content":"hi","name":"x","role":"user"}]'
    assert pa.messages == ({"role": "user", "content": "hi", "name": "x"},)


def test_chat_prompt_of_a_conversation_prefixes_its_continuation() -> None:
    first = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    longer = [*first, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]
    short = P.parse("/v1/chat/completions", orjson.dumps({"model": "m", "messages": first})).prompt_text
    long = P.parse("/v1/chat/completions", orjson.dumps({"model": "m", "messages": longer})).prompt_text
    assert long.startswith(short[:-1])


def test_chat_content_parts_and_null_content() -> None:
    doc = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "x"}]},
            {"role": "assistant", "content": None, "tool_calls": []},
        ],
    }
    assert P.parse("/v1/chat/completions", orjson.dumps(doc)).messages is not None


def test_fields() -> None:
    doc = {"model": "m", "prompt": "p", "stream": True, "cache_salt": "s", "max_tokens": 9}
    parsed = P.parse("/v1/completions", orjson.dumps(doc))
    assert (parsed.model, parsed.stream, parsed.cache_salt, parsed.max_tokens) == ("m", True, "s", 9)
    chat = {
        "model": "m",
        "messages": [{"role": "u", "content": "x"}],
        "max_completion_tokens": 3,
        "stream": None,
    }
    assert P.parse("/v1/chat/completions", orjson.dumps(chat)).max_tokens == 3


@pytest.mark.parametrize(
    "path, body, fragment",
    [
        ("/v1/completions", b"", "is empty"),
        ("/v1/completions", b"{", "not valid JSON"),
        ("/v1/completions", b'"str"', "JSON object"),
        ("/v1/completions", b'{"prompt":"p"}', "'model'"),
        ("/v1/completions", b'{"model":"","prompt":"p"}', "'model'"),
        ("/v1/completions", b'{"model":["m"],"prompt":"p"}', "'model'"),
        ("/v1/completions", b'{"model":"m"}', "'prompt' is required"),
        ("/v1/completions", b'{"model":"m","prompt":[]}', "'prompt'"),
        ("/v1/completions", b'{"model":"m","prompt":["a",1]}', "strings only"),
        ("/v1/completions", b'{"model":"m","prompt":[1,"a"]}', "integers only"),
        ("/v1/completions", b'{"model":"m","prompt":[1,true]}', "integers only"),
        ("/v1/completions", b'{"model":"m","prompt":[[1],[]]}', "prompt[1]"),
        ("/v1/completions", b'{"model":"m","prompt":{"a":1}}', "'prompt'"),
        ("/v1/completions", b'{"model":"m","prompt":"p","stream":1}', "'stream'"),
        ("/v1/completions", b'{"model":"m","prompt":"p","cache_salt":1}', "'cache_salt'"),
        ("/v1/completions", b'{"model":"m","prompt":"p","max_tokens":-1}', "'max_tokens'"),
        ("/v1/completions", b'{"model":"m","prompt":"p","max_tokens":1.5}', "'max_tokens'"),
        ("/v1/chat/completions", b'{"model":"m"}', "'messages'"),
        ("/v1/chat/completions", b'{"model":"m","messages":{}}', "'messages'"),
        ("/v1/chat/completions", b'{"model":"m","messages":["x"]}', "messages[0]"),
        ("/v1/chat/completions", b'{"model":"m","messages":[{"role":1}]}', "messages[0].role"),
        (
            "/v1/chat/completions",
            b'{"model":"m","messages":[{"role":"u","content":5}]}',
            "messages[0].content",
        ),
        ("/v1/chat/completions", b'{"model":"m","messages":[{"role":"u","content":["x"]}]}', "content"),
        ("/v1/embeddings", b'{"model":"m"}', "'input' is required"),
        ("/v1/responses", b'{"model":"m"}', "'input' is required"),
        ("/v1/responses", b'{"model":"m","input":[1]}', "'input'"),
        ("/v1/responses", b'{"model":"m","input":"x","instructions":3}', "'instructions'"),
        ("/v1/conversations", b'{"items":"x"}', "'items'"),
        ("/v1/models", b'{"model":5}', "'model'"),
    ],
)
def test_invalid_bodies(path: str, body: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        P.parse(path, body)
    assert info.value.status == 400
    assert fragment in info.value.message


def test_rewrite_model_keeps_everything_else() -> None:
    body = b'{"model":"a","prompt":"p","temperature":0.5}'
    parsed = P.parse("/v1/completions", body)
    new = P.rewrite_model(parsed, body, "b")
    assert orjson.loads(new) == {"model": "b", "prompt": "p", "temperature": 0.5}
    assert parsed.document == {"model": "a", "prompt": "p", "temperature": 0.5}  # not mutated


def test_passthrough_parser() -> None:
    pp = PassthroughParser()
    parsed = pp.parse("/v1/chat/completions", b"\xff\xfe")
    assert parsed.api is ApiKind.CHAT_COMPLETIONS and parsed.model == "" and parsed.prompt_text == ""
    assert pp.rewrite_model(parsed, b"x", "m") == b"x"
    assert pp.name == "passthrough-parser" and P.name == "openai-parser"


def test_build_request() -> None:
    parsed = P.parse("/v1/completions", b'{"model":"m","prompt":"12345678","cache_salt":"s","stream":true}')
    req = build_request(
        request_id="r",
        headers={"x-gateway-model-name-rewrite": "t"},
        parsed=parsed,
        priority=-2,
        fairness_id="f",
        body_size=60,
    )
    assert (req.model, req.target_model, req.token_estimate, req.cache_salt) == ("m", "t", 2, "s")
    assert req.stream and req.sheddable and req.fairness_id == "f" and req.body_size == 60
    req2 = build_request(request_id="r", headers={}, parsed=parsed, priority=0, fairness_id="f", body_size=0)
    assert req2.target_model == "m"


def test_canonical_json() -> None:
    assert canonical_json({"b": 1, "a": [{"d": 1, "c": 2}]}) == '{"a":[{"c":2,"d":1}],"b":1}'
