"""The configured parser chain drives the ext_proc Session: the format of each request picks its
parser by path, the parser's fields reach the scheduled request, bad bodies of every format end in a
400 with a JSON error, and the response usage is read in the request's format."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from extproc_messages import request_body, request_headers, response_body, response_headers, result
from test_protocol_errors import immediate

from epp.config.sections import load_picker_config
from epp.protocol import Completed, Schedule, Send, Session, SessionConfig
from epp.request import vllm_engine as pb
from epp.request.grpc_frame import frame
from scheduler.types import Usage

CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- {name: maxScore, type: max-score-picker}
- {name: openai, type: openai-parser}
- {name: anthropic, type: anthropic-parser}
- {name: grpc, type: vllmgrpc-parser}
- {name: sglang, type: sglanghttp-parser}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: maxScore
requestHandler:
  parsers:
  - pluginRef: openai
  - pluginRef: anthropic
  - pluginRef: grpc
  - pluginRef: sglang
"""
GENERATE = "/vllm.grpc.engine.VllmEngine/Generate"


@pytest.fixture(scope="module")
def config() -> SessionConfig:
    return SessionConfig(parser=load_picker_config(None, CONFIG).parser)


def schedule(config: SessionConfig, path: str, body: bytes, **headers: str) -> tuple[Session, Schedule]:
    s = Session(config)
    assert s.receive(request_headers(headers, path=path)) == []
    actions = s.receive(request_body(body))
    assert len(actions) == 1 and isinstance(actions[0], Schedule)
    return s, actions[0]


def completed(actions: list[Any]) -> Usage:
    done = [a.completion for a in actions if isinstance(a, Completed)]
    assert len(done) == 1
    return done[0].usage


MESSAGES = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 256,
    "stream": True,
    "system": "be brief",
    "messages": [{"role": "user", "content": "Hello"}],
}


def test_anthropic_body_is_routed_with_its_model(config: SessionConfig) -> None:
    _, sched = schedule(config, "/v1/messages", orjson.dumps(MESSAGES))
    request = sched.request
    assert request.model == request.target_model == "claude-sonnet-4-6"
    assert request.stream and request.messages == tuple(MESSAGES["messages"])
    assert "be brief" in request.prompt_text and request.token_estimate == len(request.prompt_text) // 4


def test_anthropic_model_rewrite_reaches_the_forwarded_body(config: SessionConfig) -> None:
    s, sched = schedule(
        config, "/v1/messages", orjson.dumps(MESSAGES), **{"x-gateway-model-name-rewrite": "claude-haiku"}
    )
    assert sched.request.target_model == "claude-haiku"
    sends = [a.response for a in s.scheduled(result("10.0.0.1:8000")) if isinstance(a, Send)]
    forwarded = b"".join(
        r.request_body.response.body_mutation.streamed_response.body
        for r in sends
        if r.HasField("request_body")
    )
    assert orjson.loads(forwarded)["model"] == "claude-haiku"


def anthropic_event(data: dict[str, Any]) -> bytes:
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def test_anthropic_stream_usage_spans_the_first_and_last_events(config: SessionConfig) -> None:
    s, _ = schedule(config, "/v1/messages", orjson.dumps(MESSAGES))
    s.scheduled(result("10.0.0.1:8000"))
    s.receive(response_headers(content_type="text/event-stream"))
    start = {
        "type": "message_start",
        "message": {"usage": {"input_tokens": 25, "cache_read_input_tokens": 5}},
    }
    s.receive(response_body(anthropic_event(start)))
    delta = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "tok"}}
    for _ in range(40):  # more chunks than the SSE window: message_start is kept in the head
        s.receive(response_body(anthropic_event(delta)))
    end = {"type": "message_delta", "usage": {"output_tokens": 41}}
    actions = s.receive(
        response_body(anthropic_event(end) + anthropic_event({"type": "message_stop"}), eos=True)
    )
    assert completed(actions) == Usage(25, 41, 66, 5)


def test_vllm_grpc_generate_is_parsed_and_its_usage_read_from_frames(config: SessionConfig) -> None:
    body = frame(pb.GenerateRequest(text="Hello there", stream=True).SerializeToString())
    s, sched = schedule(config, GENERATE, body, **{"content-type": "application/grpc"})
    assert sched.request.prompt_text == "Hello there" and sched.request.stream and sched.request.model == ""
    s.scheduled(result("10.0.0.1:8000"))
    s.receive(response_headers(content_type="application/grpc"))
    chunk = pb.GenerateResponse(chunk=pb.GenerateStreamChunk(token_ids=[1]))
    final = pb.GenerateResponse(
        complete=pb.GenerateComplete(prompt_tokens=3, completion_tokens=2, cached_tokens=1)
    )
    s.receive(response_body(frame(chunk.SerializeToString())))
    actions = s.receive(response_body(frame(final.SerializeToString()), eos=True))
    assert completed(actions) == Usage(3, 2, 5, 1)


def test_openai_usage_is_still_read_for_openai_requests(config: SessionConfig) -> None:
    s, _ = schedule(config, "/v1/completions", b'{"model":"m","prompt":"p"}')
    s.scheduled(result("10.0.0.1:8000"))
    s.receive(response_headers())
    usage = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    actions = s.receive(response_body(orjson.dumps({"usage": usage}), eos=True))
    assert completed(actions) == Usage(4, 2, 6, 0)


@pytest.mark.parametrize(
    "path, body, fragment",
    [
        ("/v1/messages", b"{not json", "not valid JSON"),
        ("/v1/messages", b'{"model":"c","messages":[]}', "at least one message"),
        ("/v1/chat/completions", b'{"model":"m","messages":"hi"}', "'messages'"),
        ("/generate", b'{"input_ids":[]}', "input_ids cannot be empty"),
        ("/generate", b"[]", "JSON object"),
        (GENERATE, b"\x00\x01", "invalid or unsupported gRPC payload"),
        (GENERATE, b"\x01\x00\x00\x00\x00", "compressed gRPC payload"),
        (GENERATE, frame(b"\xff\xff"), "unmarshaling GenerateRequest"),
        (GENERATE, frame(b""), "no input"),
        ("/v1/models", b"{}", "no parser registered matching path suffix for: /v1/models"),
    ],
)
def test_bad_bodies_of_every_format_get_400_with_a_json_error(
    config: SessionConfig, path: str, body: bytes, fragment: str
) -> None:
    s = Session(config)
    s.receive(request_headers(path=path))
    status, headers, payload = immediate(s.receive(request_body(body)))
    assert status == 400 and headers["content-type"] == "application/json"
    assert payload["error"]["type"] == "invalid_request_error" and fragment in payload["error"]["message"]


def test_path_falls_back_to_x_original_path(config: SessionConfig) -> None:
    s = Session(config)
    s.receive(request_headers({":path": None, "x-original-path": "/v1/messages"}))  # type: ignore[dict-item]
    actions = s.receive(request_body(orjson.dumps(MESSAGES)))
    assert isinstance(actions[0], Schedule) and actions[0].request.model == "claude-sonnet-4-6"
