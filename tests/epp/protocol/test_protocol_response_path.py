"""Response path of the ext_proc Session: forwarding, usage, rewrite back, trailers, completion."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from extproc_messages import (
    metadata,
    removed_headers,
    request_body,
    request_headers,
    response_body,
    response_headers,
    response_trailers,
    result,
    set_headers,
    streamed_chunks,
)

from epp.protocol import (
    Completed,
    ResponseChunk,
    ResponseStarted,
    Send,
    Session,
    SessionConfig,
    State,
)
from scheduler.types import Completion, Outcome, Usage

SSE = "text/event-stream"


def dispatched(
    headers: dict[str, str] | None = None,
    response_mode: int = ProcessingMode.FULL_DUPLEX_STREAMED,
    **cfg: Any,
) -> Session:
    s = Session(SessionConfig(**cfg))
    s.receive(request_headers(headers, path="/v1/chat/completions", response_mode=response_mode))
    body = b'{"model":"llama","messages":[{"role":"user","content":"hi"}]}'
    s.receive(request_body(body))
    s.scheduled(result("10.0.0.1:8000", "10.0.0.2:8000"))
    return s


def sent(actions: list[Any]) -> list[Any]:
    return [a.response for a in actions if isinstance(a, Send)]


def completions(actions: list[Any]) -> list[Completion]:
    return [a.completion for a in actions if isinstance(a, Completed)]


def sse_event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


CHUNK = {"id": "c1", "model": "llama", "choices": [{"delta": {"content": "tok"}}]}
USAGE = {
    "prompt_tokens": 11,
    "completion_tokens": 7,
    "total_tokens": 18,
    "prompt_tokens_details": {"cached_tokens": 4},
}


def test_streaming_chunks_are_forwarded_at_once_and_usage_read_from_sse() -> None:
    s = dispatched()
    actions = s.receive(response_headers(200, SSE))
    started = [a for a in actions if isinstance(a, ResponseStarted)]
    assert started[0].status == 200 and started[0].streaming
    events = [sse_event(CHUNK) for _ in range(3)] + [
        sse_event({"id": "c1", "model": "llama", "choices": [], "usage": USAGE}),
        b"data: [DONE]\n\n",
    ]
    for ev in events[:-1]:
        out = s.receive(response_body(ev))
        assert streamed_chunks([a.response for a in out], "response_body") == [(ev, False)]
        assert completions(out) == []
    out = s.receive(response_body(events[-1], eos=True))
    assert streamed_chunks([a.response for a in out if isinstance(a, Send)], "response_body") == [
        (events[-1], True)
    ]
    (done,) = completions(out)
    assert done.outcome is Outcome.OK and done.status_code == 200
    assert done.usage == Usage(11, 7, 18, 4)
    assert done.output_chunks == 5
    assert done.decode_seconds > 0.0  # first to last chunk of a streamed response
    assert s.abort(Outcome.CLIENT_CANCEL) == []


def test_decode_seconds_is_measured_between_the_first_and_last_streamed_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import epp.protocol.response as response_module

    now = [100.0]
    monkeypatch.setattr(response_module, "perf_counter", lambda: now[0])
    s = dispatched()
    s.receive(response_headers(200, SSE))
    now[0] = 100.5
    s.receive(response_body(sse_event(CHUNK)))  # the first chunk: decoding starts
    now[0] = 100.75
    s.receive(response_body(sse_event(CHUNK)))
    now[0] = 101.25
    (done,) = completions(s.receive(response_body(b"data: [DONE]\n\n", eos=True)))
    assert done.decode_seconds == pytest.approx(0.75)
    one = dispatched()
    one.receive(response_headers(200, SSE))
    (single,) = completions(one.receive(response_body(sse_event(CHUNK), eos=True)))
    assert single.decode_seconds == 0.0  # one chunk: nothing to time
    plain = dispatched()
    plain.receive(response_headers(200, content_length="80"))
    plain.receive(response_body(b'{"id": "x",'))
    (unstreamed,) = completions(plain.receive(response_body(b' "choices": []}', eos=True)))
    assert unstreamed.decode_seconds == 0.0  # not streamed: the chunks say nothing of tokens
    failed = dispatched()
    failed.receive(response_headers(500, SSE))
    failed.receive(response_body(b"data: x\n\n"))
    (error,) = completions(failed.receive(response_body(b"data: y\n\n", eos=True)))
    assert error.outcome is Outcome.UPSTREAM_ERROR and error.decode_seconds == 0.0


def test_sse_without_include_usage_reports_zero_usage() -> None:
    s = dispatched()
    s.receive(response_headers(200, SSE))
    s.receive(response_body(sse_event({**CHUNK, "usage": None})))
    (done,) = completions(s.receive(response_body(b"data: [DONE]\n\n", eos=True)))
    assert done.usage == Usage()


def test_sse_usage_split_across_chunks_is_found() -> None:
    s = dispatched()
    s.receive(response_headers(200, SSE))
    event = sse_event({"id": "c1", "choices": [], "usage": USAGE})
    cut1, cut2 = 10, event.index(b'"usage"') + 12
    s.receive(response_body(event[:cut1]))
    s.receive(response_body(event[cut1:cut2]))
    s.receive(response_body(event[cut2:]))
    (done,) = completions(s.receive(response_body(b"data: [DONE]\n\n", eos=True)))
    assert done.usage.total_tokens == 18


def test_continuous_usage_takes_the_last_report() -> None:
    s = dispatched()
    s.receive(response_headers(200, SSE))
    for n in (1, 2, 3):
        s.receive(response_body(sse_event({**CHUNK, "usage": {"prompt_tokens": 5, "completion_tokens": n}})))
    (done,) = completions(s.receive(response_body(b"data: [DONE]\n\n", eos=True)))
    assert done.usage == Usage(5, 3, 8, 0)


@pytest.mark.parametrize(
    "payload, expected",
    [
        ({"model": "llama", "usage": USAGE}, Usage(11, 7, 18, 4)),
        ({"object": "response", "usage": {"input_tokens": 3, "output_tokens": 2}}, Usage(3, 2, 5, 0)),
        ({"model": "llama"}, Usage()),
    ],
)
def test_json_usage(payload: dict[str, Any], expected: Usage) -> None:
    s = dispatched()
    s.receive(response_headers(200))
    body = orjson.dumps(payload)
    s.receive(response_body(body[:7]))
    (done,) = completions(s.receive(response_body(body[7:], eos=True)))
    assert done.usage == expected


def test_non_2xx_is_upstream_error_without_usage() -> None:
    s = dispatched()
    (started, _) = s.receive(response_headers(503))
    assert isinstance(started, ResponseStarted) and started.status == 503
    (done,) = completions(s.receive(response_body(orjson.dumps({"usage": USAGE}), eos=True)))
    assert done.outcome is Outcome.UPSTREAM_ERROR and done.status_code == 503 and done.usage == Usage()


def test_response_headers_with_end_of_stream_complete_at_once() -> None:
    s = dispatched()
    (done,) = completions(s.receive(response_headers(204, eos=True)))
    assert done.outcome is Outcome.OK and done.status_code == 204
    assert s.state is State.COMPLETE


def test_served_endpoint_feedback_from_response_metadata() -> None:
    md = metadata({"envoy.lb": {"x-gateway-destination-endpoint-served": "10.0.0.2:8000"}})
    s = dispatched()
    s.receive(response_headers(200))
    (done,) = completions(s.receive(response_body(b"{}", eos=True, md=md)))
    assert done.served_endpoint == "10.0.0.2:8000"


def test_served_endpoint_on_response_headers() -> None:
    md = metadata({"envoy.lb": {"x-gateway-destination-endpoint-served": "10.0.0.1:8000"}})
    s = dispatched()
    started = [a for a in s.receive(response_headers(200, md=md)) if isinstance(a, ResponseStarted)]
    # the response-headers hooks see the served endpoint (in-flight accounting follows a fallback)
    assert started[0].headers["x-gateway-destination-endpoint-served"] == "10.0.0.1:8000"
    (done,) = completions(s.receive(response_body(b"{}", eos=True)))
    assert done.served_endpoint == "10.0.0.1:8000"


@pytest.mark.parametrize("header_map", [True, False])
def test_response_header_map_only_when_hooks_want_it(header_map: bool) -> None:
    md = metadata({"envoy.lb": {"x-gateway-destination-endpoint-served": "10.0.0.1:8000"}})
    s = dispatched(response_header_map=header_map)
    msg = response_headers(503, SSE, md=md, content_length="17", x_server="sim", Retry_After="1")
    (started,) = [a for a in s.receive(msg) if isinstance(a, ResponseStarted)]
    assert started.status == 503 and started.streaming
    own = {":status": "503", "content-type": SSE, "content-length": "17"}
    if header_map:  # every header, lower-cased, plus the served endpoint
        extra = {
            "x-server": "sim",
            "retry-after": "1",
            "x-gateway-destination-endpoint-served": "10.0.0.1:8000",
        }
        assert dict(started.headers) == own | extra
    else:  # what the session needs itself, nothing else decoded
        assert dict(started.headers) == own
    (done,) = completions(s.receive(response_body(b"x", eos=True)))
    assert done.outcome is Outcome.UPSTREAM_ERROR and done.status_code == 503
    assert done.served_endpoint == "10.0.0.1:8000"


def test_model_rewritten_back_in_streamed_response() -> None:
    s = dispatched({"x-gateway-model-name-rewrite": "llama-lora"})
    (_, hdr) = s.receive(response_headers(200, SSE, content_length="999"))
    assert removed_headers(hdr.response, "response_headers") == ["content-length"]
    ev = b'data: {"id":"c","model":"llama-lora","choices":[]}\n\n'
    out = s.receive(response_body(ev))
    (chunk, eos) = streamed_chunks([a.response for a in out], "response_body")[0]
    assert chunk == b'data: {"id":"c","model":"llama","choices":[]}\n\n' and not eos


def test_model_rewritten_back_in_json_response_with_spaces() -> None:
    s = dispatched({"x-gateway-model-name-rewrite": "llama-lora"})
    s.receive(response_headers(200, SSE))
    out = s.receive(response_body(b'data: {"model": "llama-lora"}\n\n'))
    assert (
        streamed_chunks([a.response for a in out], "response_body")[0][0] == b'data: {"model": "llama"}\n\n'
    )


def test_model_rewritten_back_in_non_streamed_body_held_until_complete() -> None:
    s = dispatched({"x-gateway-model-name-rewrite": "llama-lora"})
    (_, hdr) = s.receive(response_headers(200, content_length="80"))
    assert removed_headers(hdr.response, "response_headers") == ["content-length"]
    body = orjson.dumps({"id": "x", "model": "llama-lora", "choices": [], "usage": USAGE})
    assert s.receive(response_body(body[:20])) == []  # held
    out = s.receive(response_body(body[20:], eos=True))
    sent = streamed_chunks([a.response for a in out if isinstance(a, Send)], "response_body")
    new = b"".join(c for c, _ in sent)
    assert orjson.loads(new)["model"] == "llama" and sent[-1][1] is True
    (done,) = completions(out)
    assert done.usage.total_tokens == 18 and done.output_chunks == 2


def test_no_rewrite_means_chunks_forwarded_unchanged() -> None:
    s = dispatched()
    (_, hdr) = s.receive(response_headers(200, content_length="17"))
    assert not hdr.response.response_headers.response.HasField("header_mutation")
    body = b'{"model":"llama"}'
    out = s.receive(response_body(body, eos=False))
    assert streamed_chunks([a.response for a in out], "response_body") == [(body, False)]


def test_trailers_finish_a_grpc_response() -> None:
    s = dispatched()
    s.receive(response_headers(200, "application/grpc"))
    assert completions(s.receive(response_body(b"\x00\x00\x00\x00\x02hi"))) == []
    out = s.receive(response_trailers())
    assert [a.response.WhichOneof("response") for a in out if isinstance(a, Send)] == ["response_trailers"]
    (done,) = completions(out)
    assert done.outcome is Outcome.OK
    assert s.abort(Outcome.STREAM_RESET) == []


def test_trailers_with_grpc_error_status_are_an_upstream_error() -> None:
    s = dispatched()
    s.receive(response_headers(200, "application/grpc"))
    (done,) = completions(s.receive(response_trailers(grpc_status="14")))
    assert done.outcome is Outcome.UPSTREAM_ERROR and done.status_code == 200


def test_trailers_after_end_of_stream_are_answered_without_second_completion() -> None:
    s = dispatched()
    s.receive(response_headers(200))
    assert len(completions(s.receive(response_body(b"{}", eos=True)))) == 1
    out = s.receive(response_trailers())
    assert completions(out) == [] and len(out) == 1


def test_trailers_flush_a_held_body() -> None:
    s = dispatched({"x-gateway-model-name-rewrite": "llama-lora"})
    s.receive(response_headers(200))
    s.receive(response_body(b'{"model":"llama-lora"}'))
    out = s.receive(response_trailers())
    kinds = [a.response.WhichOneof("response") for a in out if isinstance(a, Send)]
    assert kinds == ["response_body", "response_trailers"]
    assert sent(out)[0].response_body.response.body_mutation.streamed_response.body == b'{"model":"llama"}'


@pytest.mark.parametrize(
    "outcome", [Outcome.CLIENT_CANCEL, Outcome.STREAM_RESET, Outcome.TIMEOUT, Outcome.SHUTDOWN]
)
@pytest.mark.parametrize("stage", ["dispatched", "responding"])
def test_abort_completes_exactly_once(outcome: Outcome, stage: str) -> None:
    s = dispatched()
    if stage == "responding":
        s.receive(response_headers(200, SSE))
        s.receive(response_body(b"data: {}\n\n"))
    (done,) = completions(s.abort(outcome))
    assert done.outcome is outcome
    assert done.status_code == (200 if stage == "responding" else 0)
    assert s.abort(outcome) == [] and s.abort(Outcome.OK) == []
    assert s.state is State.CLOSED


def test_abort_before_dispatch_emits_nothing() -> None:
    s = Session(SessionConfig())
    s.receive(request_headers())
    s.receive(request_body(b'{"model":"m","prompt":"p"}'))
    assert s.abort(Outcome.CLIENT_CANCEL) == []


def test_response_chunk_actions_when_enabled() -> None:
    s = dispatched(response_chunks=True)
    s.receive(response_headers(200, SSE))
    out = s.receive(response_body(b"data: {}\n\n"))
    assert [type(a) for a in out] == [ResponseChunk, Send]
    assert out[0].chunk == b"data: {}\n\n"  # type: ignore[union-attr]
    assert not any(isinstance(a, ResponseChunk) for a in dispatched().receive(response_headers(200)))
    out = s.receive(response_body(b"data: {}\n\n"))
    assert [type(a) for a in out] == [ResponseChunk, Send]  # every chunk


def test_first_chunk_only_emits_one_response_chunk_action_per_response() -> None:
    s = dispatched(response_chunks=True, first_chunk_only=True)
    s.receive(response_headers(200, SSE))
    kinds = [[type(a) for a in s.receive(response_body(sse_event(CHUNK)))] for _ in range(3)]
    assert kinds == [[ResponseChunk, Send], [Send], [Send]]
    last = s.receive(response_body(b"data: [DONE]\n\n", eos=True))
    assert not any(isinstance(a, ResponseChunk) for a in last)
    (done,) = completions(last)
    assert done.output_chunks == 4  # the chunks are still counted


def test_buffered_response_mode_with_rewrite_replaces_body_and_length() -> None:
    s = dispatched({"x-gateway-model-name-rewrite": "llama-lora"}, response_mode=ProcessingMode.BUFFERED)
    (_, hdr) = s.receive(response_headers(200, content_length="22"))
    assert removed_headers(hdr.response, "response_headers") == []
    body = b'{"model":"llama-lora"}'
    out = s.receive(response_body(body, eos=True))
    resp = sent(out)[0]
    assert resp.response_body.response.body_mutation.body == b'{"model":"llama"}'
    assert set_headers(resp, "response_body") == {"content-length": "17"}
    assert len(completions(out)) == 1


def test_buffered_response_mode_without_change_sends_plain_continue() -> None:
    s = dispatched(response_mode=ProcessingMode.BUFFERED)
    s.receive(response_headers(200))
    out = s.receive(response_body(b'{"model":"llama"}', eos=True))
    assert not sent(out)[0].response_body.response.HasField("body_mutation")


def test_streamed_response_mode_answers_each_chunk_rewriting_in_place() -> None:
    s = dispatched({"x-gateway-model-name-rewrite": "llama-lora"}, response_mode=ProcessingMode.STREAMED)
    (_, hdr) = s.receive(response_headers(200, content_length="30"))
    assert removed_headers(hdr.response, "response_headers") == ["content-length"]
    (first,) = s.receive(response_body(b'{"model":"llama-lora",'))
    assert first.response.response_body.response.body_mutation.body == b'{"model":"llama",'  # type: ignore[union-attr]
    last = s.receive(response_body(b'"x":1}', eos=True))
    assert not sent(last)[0].response_body.response.HasField("body_mutation")
    assert len(completions(last)) == 1


def test_response_body_mode_none_completes_on_headers() -> None:
    s = dispatched(response_mode=ProcessingMode.NONE)
    (done,) = completions(s.receive(response_headers(200)))
    assert done.outcome is Outcome.OK


@pytest.mark.parametrize("path", ["body", "headers", "trailers", "bug"])
def test_completed_precedes_the_sends_of_its_batch(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Envoy may cancel the stream once it has the last response: the hook must not wait for the write."""
    s = dispatched({"x-gateway-model-name-rewrite": "llama-lora"})
    if path == "headers":
        out = s.receive(response_headers(200, eos=True))
    else:
        s.receive(response_headers(200))
        s.receive(response_body(b'{"model":"llama-lora"}'))
        if path == "body":
            out = s.receive(response_body(b"", eos=True))
        elif path == "trailers":
            out = s.receive(response_trailers())
        else:
            from epp.protocol.response import ResponseState

            monkeypatch.setattr(ResponseState, "finish", lambda self: 1 / 0)
            out = s.receive(response_body(b"", eos=True))
    kinds = [type(a).__name__ for a in out]
    assert kinds.count("Completed") == 1 and "Send" in kinds
    assert kinds.index("Completed") < kinds.index("Send")


def test_response_headers_provider_adds_headers_with_served_endpoint() -> None:
    calls: list[tuple[str, str | None]] = []

    def provider(request: Any, result: Any, served: str | None) -> dict[str, str]:
        calls.append((request.request_id, served))
        return {"x-session-token": f"token-for-{served}"}

    md = metadata({"envoy.lb": {"x-gateway-destination-endpoint-served": "10.0.0.2:8000"}})
    s = dispatched(response_headers=provider)
    (_, hdr) = s.receive(response_headers(200, md=md))
    assert set_headers(hdr.response, "response_headers") == {"x-session-token": "token-for-10.0.0.2:8000"}
    assert calls == [("rid-1", "10.0.0.2:8000")]


def test_failing_response_headers_provider_adds_nothing() -> None:
    def provider(request: Any, result: Any, served: str | None) -> dict[str, str]:
        raise RuntimeError("plugin bug")

    s = dispatched(response_headers=provider)
    (_, hdr) = s.receive(response_headers(200))
    assert not hdr.response.response_headers.response.HasField("header_mutation")
    (done,) = completions(s.receive(response_body(b"{}", eos=True)))
    assert done.outcome is Outcome.OK


# GIE's hermetic table, response cases ("response buffering: ..."): the body comes back byte for byte
SHEDDABLE_JSON = b'{"max_tokens":100,"model":"sql-lora-sheddable","prompt":"test6","temperature":0}'


@pytest.mark.parametrize(
    "chunks",
    [
        [SHEDDABLE_JSON[:33], SHEDDABLE_JSON[33:]],  # multi-chunk JSON
        [b"no healthy upstream"],  # invalid JSON: passed through, no usage
        [SHEDDABLE_JSON, b""],  # empty EOS chunk (JSON)
    ],
    ids=["multi-chunk-json", "invalid-json", "empty-eos-chunk"],
)
def test_gie_response_buffering_cases_pass_the_body_through(chunks: list[bytes]) -> None:
    s = dispatched()
    s.receive(response_headers(200))
    forwarded: list[tuple[bytes, bool]] = []
    done: list[Completion] = []
    for i, chunk in enumerate(chunks):
        actions = s.receive(response_body(chunk, eos=i == len(chunks) - 1))
        forwarded += streamed_chunks(sent(actions), "response_body")
        done += completions(actions)
    assert b"".join(body for body, _ in forwarded) == b"".join(chunks)
    assert forwarded[-1][1] is True
    (completion,) = done
    assert completion.outcome is Outcome.OK and completion.usage == Usage()


def _metadata(request: Any, result: Any, usage: Usage) -> dict[str, dict[str, float]]:
    return {"envoy.lb": {"cost": float(usage.total_tokens)}} if usage.total_tokens else {}


def _md(reply: Any) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(reply.dynamic_metadata) if reply.HasField("dynamic_metadata") else {}


@pytest.mark.parametrize("mode", [ProcessingMode.FULL_DUPLEX_STREAMED, ProcessingMode.BUFFERED])
def test_response_metadata_rides_on_the_last_body_reply(mode: int) -> None:
    s = dispatched(response_mode=mode, response_metadata=_metadata)
    s.receive(response_headers(200))
    body = orjson.dumps({"model": "llama", "usage": USAGE})
    replies = sent(s.receive(response_body(body, eos=True)))
    assert [_md(r) for r in replies][-1] == {"envoy.lb": {"cost": 18.0}}
    assert all(_md(r) == {} for r in replies[:-1])


def test_response_metadata_on_sse_end_and_absent_without_usage() -> None:
    s = dispatched(response_metadata=_metadata)
    s.receive(response_headers(200, SSE))
    first = sent(s.receive(response_body(sse_event({"choices": [], "usage": USAGE}))))
    assert [_md(r) for r in first] == [{}]  # only at the end of the response
    last = sent(s.receive(response_body(b"data: [DONE]\n\n", eos=True)))
    assert _md(last[-1]) == {"envoy.lb": {"cost": 18.0}}
    bare = dispatched(response_metadata=_metadata)
    bare.receive(response_headers(200, SSE))
    assert [_md(r) for r in sent(bare.receive(response_body(b"", eos=True)))] == [{}]


def test_response_metadata_with_trailers_and_never_on_shared_replies() -> None:
    s = dispatched(response_metadata=lambda *_: {"ns": {"k": 1.0}})
    s.receive(response_headers(200, "application/grpc"))
    s.receive(response_body(b""))
    replies = sent(s.receive(response_trailers()))
    assert _md(replies[-1]) == {"ns": {"k": 1.0}}
    # The same empty replies of a session without a provider carry nothing (no shared message mutated).
    plain = dispatched()
    plain.receive(response_headers(200, "application/grpc"))
    plain.receive(response_body(b""))
    assert all(_md(r) == {} for r in sent(plain.receive(response_trailers())))


def test_response_metadata_failure_adds_nothing() -> None:
    def boom(*_: Any) -> dict[str, dict[str, float]]:
        raise RuntimeError("x")

    s = dispatched(response_metadata=boom)
    s.receive(response_headers(200))
    replies = sent(s.receive(response_body(orjson.dumps({"usage": USAGE}), eos=True)))
    assert replies and all(_md(r) == {} for r in replies)
