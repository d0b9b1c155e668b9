"""``openai-parser`` as a plugin: claims, the ``/render`` sub-paths and image generation (cases from
llm-d-router's openai_test.go), and the optional model of the wrapped (Vertex AI) form."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from epp.protocol.usage import usage_from_json
from epp.request import InvalidRequestError, OpenAIParser
from epp.request.openai import OPENAI_CLAIMS
from scheduler.types import ApiKind, Usage

P = OpenAIParser("p")


def test_type_name_and_claims() -> None:
    assert (P.plugin_type, P.name) == ("openai-parser", "p")
    assert OpenAIParser().name == "openai-parser"
    assert (
        P.claims
        == OPENAI_CLAIMS
        == (
            "chat/completions",
            "completions",
            "embeddings",
            "responses",
            "conversations",
            "chat/completions/render",
            "completions/render",
            "images/generations",
        )
    )


CHAT = {"model": "test", "messages": [{"role": "user", "content": "hello"}]}


@pytest.mark.parametrize(
    "path, doc, api",
    [
        ("/v1/chat/completions/render", CHAT, ApiKind.CHAT_COMPLETIONS),
        ("/v1/chat/completions/render/", CHAT, ApiKind.CHAT_COMPLETIONS),
        ("/v1/completions/render", {"model": "test", "prompt": "hi"}, ApiKind.COMPLETIONS),
    ],
)
def test_render_sub_paths_share_the_parent_schema(path: str, doc: dict[str, Any], api: ApiKind) -> None:
    parsed = P.parse(path, orjson.dumps(doc))
    assert parsed.api is api and parsed.model == "test"


@pytest.mark.parametrize(
    "path, doc",
    [
        (
            "/v1/images/generations",
            {"model": "test-image-model", "prompt": "a cat wearing a spacesuit", "n": 2, "size": "1024x1024"},
        ),
        ("/openai/v1/images/generations", {"model": "test-image-model", "prompt": "a dragon"}),
    ],
)
def test_images_generations(path: str, doc: dict[str, Any]) -> None:
    parsed = P.parse(path, orjson.dumps(doc))
    assert parsed.model == "test-image-model" and parsed.prompt_text == doc["prompt"]
    assert orjson.loads(P.rewrite_model(parsed, b"", "other"))["model"] == "other"


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ({"model": "test-image-model", "size": "512x512"}, "'prompt'"),
        ({"model": "test-image-model", "prompt": ""}, "'prompt'"),
        ({"prompt": "a dog"}, "'model'"),  # upstream's director: "model not found in request body"
        ({"model": "m", "prompt": "a dog", "stream": 1}, "'stream'"),
    ],
)
def test_images_generations_bad_requests(doc: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        P.parse("/v1/images/generations", orjson.dumps(doc))
    assert fragment in info.value.message


def test_wrapped_json_may_omit_the_model() -> None:
    body = orjson.dumps({"messages": [{"role": "user", "content": "Hello"}]})
    with pytest.raises(InvalidRequestError, match="'model'"):
        P.parse("/chat/completions", body)
    assert P.parse_json("/chat/completions", body, require_model=False).model == ""


@pytest.mark.parametrize(
    "body, want",
    [
        # openai_extractusage_test.go: malformed fields never crash; numeric strings are coerced
        (b'{"object":"chat.completion","usage":"oops"}', None),
        (
            b'{"object":"chat.completion","usage":{"prompt_tokens_details":0,"prompt_tokens":7}}',
            Usage(7, 0, 7, 0),
        ),
        (
            b'{"usage":{"prompt_tokens":"1024","completion_tokens":"7","total_tokens":"1031"}}',
            Usage(1024, 7, 1031, 0),
        ),
        (b'{"usage":{"prompt_tokens":"x","completion_tokens":2.0}}', Usage(0, 2, 2, 0)),
        (b'{"usage":{"prompt_tokens":1e300,"completion_tokens":-3,"total_tokens":true}}', Usage(0, 0, 0, 0)),
        # openai_test.go ParseResponse
        (b'{"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}', Usage(10, 20, 30, 0)),
        (
            b'{"object":"conversation","usage":{"input_tokens":15,"output_tokens":25,"total_tokens":40}}',
            Usage(15, 25, 40, 0),
        ),
        (
            b'{"usage":{"prompt_tokens":100,"completion_tokens":50,"total_tokens":150,'
            b'"prompt_tokens_details":{"cached_tokens":40}}}',
            Usage(100, 50, 150, 40),
        ),
        (
            b'{"usage":{"input_tokens":100,"output_tokens":50,"total_tokens":150,'
            b'"input_tokens_details":{"cached_tokens":40}}}',
            Usage(100, 50, 150, 40),
        ),
        (b'{"object": "chat.completion"}', None),
        (b"{malformed", None),
    ],
)
def test_openai_response_usage(body: bytes, want: Usage | None) -> None:
    assert usage_from_json(body) == want
