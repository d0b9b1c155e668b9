"""Request path of the ext_proc Session, driven message by message with real protobuf messages."""

from __future__ import annotations

import orjson
import pytest
from extproc_messages import (
    BUFFERED,
    FULL_DUPLEX,
    lb_metadata,
    metadata,
    removed_headers,
    request_body,
    request_headers,
    request_trailers,
    result,
    set_headers,
    streamed_chunks,
)

from epp.protocol import (
    Dispatched,
    RemoteProtocolError,
    Schedule,
    Send,
    Session,
    SessionConfig,
    State,
)
from epp.request import PassthroughParser
from scheduler.handle import PluginHandle
from scheduler.plugins.request_attributes import AgentIdentity, agent_identity_factory
from scheduler.types import ApiKind

CHAT = orjson.dumps({"model": "llama", "messages": [{"role": "user", "content": "hi"}], "stream": True})


def sends(actions: list) -> list:
    return [a.response for a in actions if isinstance(a, Send)]


def start(
    session: Session, body: bytes, headers: dict | None = None, *, chunks: int = 1, **kw: object
) -> Schedule:
    hdrs = {"content-length": str(len(body))}
    hdrs.update(headers or {})
    assert session.receive(request_headers(hdrs, **kw)) == []  # type: ignore[arg-type]
    step = max(1, len(body) // chunks)
    pieces = [body[i : i + step] for i in range(0, len(body), step)] or [b""]
    for piece in pieces[:-1]:
        assert session.receive(request_body(piece, eos=False)) == []
    actions = session.receive(request_body(pieces[-1], eos=True))
    assert len(actions) == 1 and isinstance(actions[0], Schedule)
    return actions[0]


def test_full_duplex_defers_headers_until_scheduled_then_headers_then_body() -> None:
    s = Session(SessionConfig())
    sched = start(s, CHAT, path="/v1/chat/completions", chunks=3)
    assert sched.request.model == "llama" and sched.request.api is ApiKind.CHAT_COMPLETIONS
    assert sched.request.stream and sched.subset is None and sched.request.body_size == len(CHAT)
    actions = s.scheduled(result("10.0.0.1:8000"))
    assert isinstance(actions[0], Dispatched)
    out = sends(actions)
    assert out[0].WhichOneof("response") == "request_headers"
    assert out[0].request_headers.response.clear_route_cache
    assert set_headers(out[0], "request_headers") == {"x-gateway-destination-endpoint": "10.0.0.1:8000"}
    body = streamed_chunks(out[1:], "request_body")
    assert body == [(CHAT, True)]
    assert s.state is State.DISPATCHED


def test_unchanged_body_is_the_original_bytes_object() -> None:
    s = Session(SessionConfig())
    start(s, CHAT, path="/v1/chat/completions")
    out = sends(s.scheduled(result("10.0.0.1:8000")))
    assert out[1].request_body.response.body_mutation.streamed_response.body == CHAT
    assert "content-length" not in set_headers(out[0], "request_headers")


def test_destination_header_equals_metadata_with_fallbacks_in_order() -> None:
    s = Session(SessionConfig())
    start(s, CHAT, path="/v1/chat/completions")
    out = sends(s.scheduled(result("10.0.0.2:8000", "10.0.0.1:8000", "10.0.0.3:8000")))
    header = set_headers(out[0], "request_headers")["x-gateway-destination-endpoint"]
    assert header == "10.0.0.2:8000,10.0.0.1:8000,10.0.0.3:8000"
    assert lb_metadata(out[0]) == {"envoy.lb": {"x-gateway-destination-endpoint": header}}


def test_result_headers_and_generated_request_id_are_set() -> None:
    s = Session(SessionConfig(request_id_factory=lambda: "gen-42"))
    sched = start(s, CHAT, {"x-request-id": None}, path="/v1/chat/completions")  # type: ignore[dict-item]
    assert sched.request.request_id == "gen-42"
    out = sends(s.scheduled(result("10.0.0.1:8000", headers={"x-prefiller-host-port": "10.0.0.9:8000"})))
    hdrs = set_headers(out[0], "request_headers")
    assert hdrs["x-request-id"] == "gen-42"
    assert hdrs["x-prefiller-host-port"] == "10.0.0.9:8000"


def test_existing_request_id_is_kept_and_not_reset() -> None:
    s = Session(SessionConfig(request_id_factory=lambda: "never"))
    sched = start(s, CHAT, {"x-request-id": "abc"}, path="/v1/chat/completions")
    assert sched.request.request_id == "abc"
    assert "x-request-id" not in set_headers(sends(s.scheduled(result("1.1.1.1:80")))[0], "request_headers")


def test_control_headers_are_read_and_removed() -> None:
    priorities = {"critical": 5, "batch": -1}
    s = Session(SessionConfig(priority_of=lambda n: priorities.get(n or "", 0)))
    hdrs = {
        "x-gateway-inference-objective": "batch",
        "x-gateway-inference-fairness-id": "tenant-a",
        "x-gateway-destination-endpoint-subset": "10.0.0.1:8000",
    }
    sched = start(s, CHAT, hdrs, path="/v1/chat/completions")
    assert sched.request.priority == -1 and sched.request.sheddable
    assert sched.request.fairness_id == "tenant-a"
    out = sends(s.scheduled(result("10.0.0.1:8000")))
    assert sorted(removed_headers(out[0], "request_headers")) == sorted(hdrs)


def test_llm_d_router_control_header_names_win_over_gies_aliases_and_all_are_removed() -> None:
    """llm-d-router's metadata/consts.go: x-llm-d-* names first, GIE's x-gateway-* as deprecated aliases."""
    priorities = {"critical": 5, "batch": -1}
    s = Session(SessionConfig(priority_of=lambda n: priorities.get(n or "", 0)))
    hdrs = {
        "x-llm-d-inference-objective": "critical",
        "x-gateway-inference-objective": "batch",
        "x-llm-d-inference-fairness-id": "tenant-new",
        "x-gateway-inference-fairness-id": "tenant-old",
        "x-llm-d-model-name-rewrite": "m-new",
        "x-gateway-model-name-rewrite": "m-old",
    }
    sched = start(s, CHAT, hdrs, path="/v1/chat/completions")
    assert sched.request.priority == 5
    assert sched.request.fairness_id == "tenant-new"
    assert sched.request.target_model == "m-new"
    out = sends(s.scheduled(result("10.0.0.1:8000")))
    assert sorted(removed_headers(out[0], "request_headers")) == sorted(hdrs)


def test_llm_d_router_control_header_names_alone() -> None:
    s = Session(SessionConfig(priority_of=lambda n: {"batch": -1}.get(n or "", 0)))
    hdrs = {
        "x-llm-d-inference-objective": "batch",
        "x-llm-d-inference-fairness-id": "t",
        "x-llm-d-model-name-rewrite": "m2",
    }
    sched = start(s, CHAT, hdrs, path="/v1/chat/completions")
    assert (sched.request.priority, sched.request.fairness_id, sched.request.target_model) == (-1, "t", "m2")


@pytest.mark.parametrize(
    ("headers", "fairness"),
    [  # llm-d-router director_test.go: the explicit header wins, then agent-identity, then the default
        ({"x-gateway-inference-fairness-id": "explicit-id", "x-claude-code-session-id": "s"}, "explicit-id"),
        ({"x-claude-code-session-id": "session-abc"}, "session-abc"),
        ({"x-unrelated": "v"}, "default-flow"),
    ],
)
def test_fairness_id_from_agent_identity(headers: dict[str, str], fairness: str) -> None:
    plugin = agent_identity_factory("agent-identity", {}, PluginHandle())
    assert isinstance(plugin, AgentIdentity)
    s = Session(SessionConfig(agent_identity=plugin.attribute))
    assert start(s, CHAT, headers, path="/v1/chat/completions").request.fairness_id == fairness


def test_default_fairness_and_priority() -> None:
    s = Session(SessionConfig())
    sched = start(s, CHAT, path="/v1/chat/completions")
    assert sched.request.fairness_id == "default-flow" and sched.request.priority == 0


def test_model_rewrite_changes_body_and_sets_content_length() -> None:
    s = Session(SessionConfig())
    sched = start(s, CHAT, {"x-gateway-model-name-rewrite": "llama-lora"}, path="/v1/chat/completions")
    assert sched.request.model == "llama" and sched.request.target_model == "llama-lora"
    out = sends(s.scheduled(result("10.0.0.1:8000")))
    new_body = b"".join(b for b, _ in streamed_chunks(out[1:], "request_body"))
    assert orjson.loads(new_body)["model"] == "llama-lora"
    assert orjson.loads(new_body)["messages"] == orjson.loads(CHAT)["messages"]
    hdrs = set_headers(out[0], "request_headers")
    assert hdrs["content-length"] == str(len(new_body))
    assert "x-gateway-model-name-rewrite" in removed_headers(out[0], "request_headers")


def test_large_body_is_streamed_back_in_chunks_of_at_most_62000_bytes() -> None:
    body = orjson.dumps({"model": "m", "prompt": "x" * 200_000})
    s = Session(SessionConfig())
    start(s, body, chunks=7)
    chunks = streamed_chunks(sends(s.scheduled(result("1.1.1.1:80")))[1:], "request_body")
    assert all(len(c) <= 62_000 for c, _ in chunks)
    assert [eos for _, eos in chunks] == [False] * (len(chunks) - 1) + [True]
    assert b"".join(c for c, _ in chunks) == body


def test_custom_chunk_size() -> None:
    s = Session(SessionConfig(chunk_size=10))
    body = b'{"model":"m","prompt":"0123456789"}'
    start(s, body)
    chunks = streamed_chunks(sends(s.scheduled(result("1.1.1.1:80")))[1:], "request_body")
    assert [len(c) for c, _ in chunks] == [10, 10, 10, 5]


def test_header_only_request_schedules_at_once_with_empty_prompt() -> None:
    s = Session(SessionConfig())
    actions = s.receive(request_headers({"x-gateway-model-name-rewrite": "m2"}, path="/v1/models", eos=True))
    (sched,) = actions
    assert isinstance(sched, Schedule)
    assert sched.request.prompt_text == "" and sched.request.api is ApiKind.OTHER
    assert sched.request.target_model == "m2"
    out = sends(s.scheduled(result("1.1.1.1:80")))
    assert len(out) == 1 and out[0].WhichOneof("response") == "request_headers"
    assert set_headers(out[0], "request_headers")["x-gateway-destination-endpoint"] == "1.1.1.1:80"


def test_request_body_mode_none_routes_on_headers() -> None:
    from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode

    s = Session(SessionConfig())
    (sched,) = s.receive(request_headers(request_mode=ProcessingMode.NONE))
    assert isinstance(sched, Schedule)


def test_missing_protocol_config_assumes_full_duplex() -> None:
    s = Session(SessionConfig())
    assert s.receive(request_headers(request_mode=None, path="/v1/chat/completions")) == []
    (sched,) = s.receive(request_body(CHAT, eos=True))
    assert isinstance(sched, Schedule)


def test_headers_given_as_value_instead_of_raw_value() -> None:
    s = Session(SessionConfig())
    s.receive(request_headers({"x-gateway-inference-fairness-id": "f"}, raw=False))
    (sched,) = s.receive(request_body(b'{"model":"m","prompt":"p"}'))
    assert sched.request.fairness_id == "f"  # type: ignore[union-attr]


def test_buffered_mode_answers_headers_then_routes_in_body_response() -> None:
    s = Session(SessionConfig())
    (ack,) = s.receive(
        request_headers(
            {"x-gateway-inference-objective": "x"}, request_mode=BUFFERED, path="/v1/chat/completions"
        )
    )
    assert isinstance(ack, Send) and ack.response.WhichOneof("response") == "request_headers"
    assert not ack.response.request_headers.response.HasField("header_mutation")
    (sched,) = s.receive(request_body(CHAT, eos=True))
    assert isinstance(sched, Schedule)
    (resp,) = sends(s.scheduled(result("10.0.0.1:8000")))
    assert resp.WhichOneof("response") == "request_body"
    common = resp.request_body.response
    assert common.clear_route_cache and not common.HasField("body_mutation")
    assert set_headers(resp, "request_body")["x-gateway-destination-endpoint"] == "10.0.0.1:8000"
    assert removed_headers(resp, "request_body") == ["x-gateway-inference-objective"]
    assert lb_metadata(resp)["envoy.lb"]["x-gateway-destination-endpoint"] == "10.0.0.1:8000"


def test_buffered_mode_with_rewrite_replaces_body() -> None:
    s = Session(SessionConfig())
    s.receive(
        request_headers(
            {"x-gateway-model-name-rewrite": "other"}, request_mode=BUFFERED, path="/v1/chat/completions"
        )
    )
    s.receive(request_body(CHAT, eos=True))
    (resp,) = sends(s.scheduled(result("10.0.0.1:8000")))
    new = resp.request_body.response.body_mutation.body
    assert orjson.loads(new)["model"] == "other"
    assert set_headers(resp, "request_body")["content-length"] == str(len(new))


def test_request_trailers_end_the_body() -> None:
    s = Session(SessionConfig())
    s.receive(request_headers())
    assert s.receive(request_body(b'{"model":"m","prompt":"p"}', eos=False)) == []
    (sched,) = s.receive(request_trailers())
    assert isinstance(sched, Schedule)
    out = sends(s.scheduled(result("1.1.1.1:80")))
    kinds = [r.WhichOneof("response") for r in out]
    assert kinds == ["request_headers", "request_body", "request_trailers"]
    assert streamed_chunks(out[1:2], "request_body")[0][1] is False


@pytest.mark.parametrize(
    "hint, expected",
    [
        (["10.0.0.1:8000", "10.0.0.2:8000"], {"10.0.0.1:8000", "10.0.0.2:8000"}),
        ("10.0.0.1:8000, 10.0.0.2:8000", {"10.0.0.1:8000", "10.0.0.2:8000"}),
        (["10.0.0.1:8000,10.0.0.3"], {"10.0.0.1:8000", "10.0.0.3"}),
        ([], set()),
        ("", set()),
    ],
)
def test_subset_hint_list_or_comma_string(hint: object, expected: set[str]) -> None:
    md = metadata({"envoy.lb.subset_hint": {"x-gateway-destination-endpoint-subset": hint}})
    s = Session(SessionConfig())
    s.receive(request_headers(md=md, path="/v1/chat/completions"))
    (sched,) = s.receive(request_body(CHAT))
    assert sched.subset == frozenset(expected)  # type: ignore[union-attr]


def test_subset_hint_absent_or_other_namespace_is_none() -> None:
    md = metadata({"envoy.lb": {"x-gateway-destination-endpoint-subset": ["1.1.1.1:80"]}})
    s = Session(SessionConfig())
    s.receive(request_headers(md=md, path="/v1/chat/completions"))
    (sched,) = s.receive(request_body(CHAT))
    assert sched.subset is None  # type: ignore[union-attr]


def test_passthrough_parser_forwards_any_body_untouched() -> None:
    s = Session(SessionConfig(parser=PassthroughParser()))
    body = b"\x00\x01 not json at all"
    sched = start(s, body, {"x-gateway-model-name-rewrite": "m"}, path="/generate")
    assert sched.request.prompt_text == "" and sched.request.target_model == "m"
    out = sends(s.scheduled(result("1.1.1.1:80")))
    assert streamed_chunks(out[1:], "request_body") == [(body, True)]
    assert "content-length" not in set_headers(out[0], "request_headers")


def test_empty_body_round_trips() -> None:
    s = Session(SessionConfig(parser=PassthroughParser()))
    start(s, b"")
    out = sends(s.scheduled(result("1.1.1.1:80")))
    assert streamed_chunks(out[1:], "request_body") == [(b"", True)]


def test_unsupported_request_body_mode_is_a_remote_protocol_error() -> None:
    from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode

    s = Session(SessionConfig())
    with pytest.raises(RemoteProtocolError, match="STREAMED"):
        s.receive(request_headers(request_mode=ProcessingMode.STREAMED))
    assert FULL_DUPLEX != ProcessingMode.STREAMED


def test_buffered_body_without_end_of_stream_then_trailers() -> None:
    """BUFFERED sends the one body message without end_of_stream when trailers follow."""
    s = Session(SessionConfig())
    s.receive(request_headers(request_mode=BUFFERED))
    (sched,) = s.receive(request_body(b'{"model":"m","prompt":"p"}', eos=False))
    assert isinstance(sched, Schedule)
    (routing,) = sends(s.scheduled(result("1.1.1.1:80")))
    assert routing.WhichOneof("response") == "request_body"
    (trailers,) = sends(s.receive(request_trailers()))
    assert trailers.WhichOneof("response") == "request_trailers"
    assert s.state is State.DISPATCHED


def test_owned_request_headers_sent_by_the_client_are_removed_unless_the_result_sets_them() -> None:
    owned = frozenset({"x-prefiller-host-port", "x-encoder-hosts-ports"})
    spoofed = {"x-prefiller-host-port": "6.6.6.6:80", "x-encoder-hosts-ports": "6.6.6.6:80"}
    s = Session(SessionConfig(owned_request_headers=owned))
    start(s, CHAT, spoofed, path="/v1/chat/completions")
    out = sends(s.scheduled(result("10.0.0.1:8000")))
    assert sorted(removed_headers(out[0], "request_headers")) == sorted(owned)
    s = Session(SessionConfig(owned_request_headers=owned))
    start(s, CHAT, spoofed, path="/v1/chat/completions")
    out = sends(s.scheduled(result("10.0.0.1:8000", headers={"x-prefiller-host-port": "10.0.1.1:8000"})))
    assert removed_headers(out[0], "request_headers") == ["x-encoder-hosts-ports"]
    assert set_headers(out[0], "request_headers")["x-prefiller-host-port"] == "10.0.1.1:8000"
    plain = Session(SessionConfig())  # no plugin owns them: passed through, as before
    start(plain, CHAT, spoofed, path="/v1/chat/completions")
    assert removed_headers(sends(plain.scheduled(result("10.0.0.1:8000")))[0], "request_headers") == []
