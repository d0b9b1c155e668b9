"""Error table, protocol violations and the 500 bug path of the ext_proc Session."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest, ProcessingResponse
from extproc_messages import (
    request_body,
    request_headers,
    response_body,
    response_headers,
    result,
)

from epp.protocol import (
    Completed,
    LocalProtocolError,
    RemoteProtocolError,
    Schedule,
    Send,
    Session,
    SessionConfig,
    State,
)
from epp.request import OpenAIParser, ParsedBody
from scheduler.types import Outcome


def immediate(actions: list[Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
    sends = [a.response for a in actions if isinstance(a, Send)]
    assert len(sends) == 1
    resp: ProcessingResponse = sends[0]
    assert resp.WhichOneof("response") == "immediate_response"
    ir = resp.immediate_response
    headers = {o.header.key: o.header.raw_value.decode() for o in ir.headers.set_headers}
    return ir.status.code, headers, orjson.loads(ir.body)


@pytest.mark.parametrize(
    "path, body, fragment",
    [
        ("/v1/completions", b"not json", "not valid JSON"),
        ("/v1/completions", b"[1, 2]", "JSON object"),
        ("/v1/completions", b'{"prompt": "x"}', "'model'"),
        ("/v1/completions", b'{"model": 3, "prompt": "x"}', "'model'"),
        ("/v1/completions", b'{"model": "m"}', "'prompt'"),
        ("/v1/completions", b'{"model": "m", "prompt": 5}', "'prompt'"),
        ("/v1/chat/completions", b'{"model": "m", "messages": []}', "'messages'"),
        ("/v1/chat/completions", b'{"model": "m", "messages": [{"content": "x"}]}', "messages[0].role"),
        ("/v1/completions", b'{"model": "m", "prompt": "x", "stream": "yes"}', "'stream'"),
    ],
)
def test_invalid_bodies_get_400_with_json_error(path: str, body: bytes, fragment: str) -> None:
    s = Session(SessionConfig())
    s.receive(request_headers(path=path))
    status, headers, payload = immediate(s.receive(request_body(body)))
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert payload["error"]["type"] == "invalid_request_error"
    assert fragment in payload["error"]["message"]
    assert s.state is State.CLOSED
    assert s.abort(Outcome.STREAM_RESET) == []


def test_413_from_content_length_before_any_body() -> None:
    s = Session(SessionConfig(max_body_bytes=100))
    status, _, payload = immediate(s.receive(request_headers({"content-length": "101"})))
    assert status == 413 and payload["error"]["type"] == "request_too_large"


def test_413_while_accumulating_without_content_length() -> None:
    s = Session(SessionConfig(max_body_bytes=100))
    assert s.receive(request_headers()) == []
    assert s.receive(request_body(b"x" * 60, eos=False)) == []
    status, _, _ = immediate(s.receive(request_body(b"x" * 60, eos=False)))
    assert status == 413
    with pytest.raises(RemoteProtocolError):
        s.receive(request_body(b"x", eos=True))


def test_body_exactly_at_limit_is_accepted() -> None:
    body = b'{"model":"m","prompt":"p"}'
    s = Session(SessionConfig(max_body_bytes=len(body)))
    s.receive(request_headers({"content-length": str(len(body))}))
    (sched,) = s.receive(request_body(body))
    assert isinstance(sched, Schedule)


@pytest.mark.parametrize(
    "status, error_type",
    [(429, "rate_limit_exceeded"), (503, "service_unavailable"), (500, "internal_error")],
)
def test_reject_answers_with_the_given_error(status: int, error_type: str) -> None:
    s = Session(SessionConfig(request_id_factory=lambda: "gen-1"))
    s.receive(request_headers({"x-request-id": ""}))
    s.receive(request_body(b'{"model":"m","prompt":"p"}'))
    got, headers, payload = immediate(s.reject(status, error_type, "because"))
    assert got == status
    assert payload == {"error": {"type": error_type, "message": "because"}}
    assert headers["x-request-id"] == "gen-1"
    assert s.abort(Outcome.OK) == []  # never dispatched: no completion


def test_scheduler_result_without_endpoints_is_503() -> None:
    s = Session(SessionConfig())
    s.receive(request_headers())
    s.receive(request_body(b'{"model":"m","prompt":"p"}'))
    status, _, payload = immediate(s.scheduled(result()))
    assert status == 503 and payload["error"]["type"] == "service_unavailable"


class _BuggyParser(OpenAIParser):
    def parse(self, path: str, body: bytes) -> ParsedBody:
        raise KeyError("oops")


def test_bug_becomes_500_with_short_message() -> None:
    s = Session(SessionConfig(parser=_BuggyParser()))
    s.receive(request_headers())
    status, _, payload = immediate(s.receive(request_body(b"{}")))
    assert status == 500
    assert payload["error"] == {"type": "internal_error", "message": "internal error in the endpoint picker"}
    assert s.state is State.CLOSED


def test_bug_after_dispatch_completes_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from epp.protocol.response import ResponseState

    def broken(self: ResponseState, data: bytes) -> bytes:
        raise ZeroDivisionError

    s = Session(SessionConfig())
    s.receive(request_headers())
    s.receive(request_body(b'{"model":"m","prompt":"p"}'))
    s.scheduled(result("1.1.1.1:80"))
    s.receive(response_headers())
    monkeypatch.setattr(ResponseState, "chunk", broken)
    actions = s.receive(response_body(b"x", eos=True))
    assert immediate(actions)[0] == 500
    completed = [a for a in actions if isinstance(a, Completed)]
    assert len(completed) == 1 and completed[0].completion.outcome is Outcome.UPSTREAM_ERROR
    assert s.abort(Outcome.CLIENT_CANCEL) == []


@pytest.mark.parametrize(
    "messages",
    [
        [request_body(b"x")],  # body before headers
        [response_headers()],  # response before any request
        [request_headers(), request_headers()],  # headers twice
        [request_headers(), request_body(b'{"model":"m","prompt":"p"}'), response_headers()],  # not scheduled
        [ProcessingRequest()],  # empty message
    ],
)
def test_protocol_violations_raise_remote_protocol_error(messages: list[ProcessingRequest]) -> None:
    s = Session(SessionConfig())
    with pytest.raises(RemoteProtocolError):
        for msg in messages:
            s.receive(msg)


def test_misuse_by_the_loop_raises_local_protocol_error() -> None:
    s = Session(SessionConfig())
    with pytest.raises(LocalProtocolError):
        s.scheduled(result("1.1.1.1:80"))
    with pytest.raises(LocalProtocolError):
        s.reject(503, "x", "y")
    s.receive(request_headers())
    s.receive(request_body(b'{"model":"m","prompt":"p"}'))
    s.scheduled(result("1.1.1.1:80"))
    with pytest.raises(LocalProtocolError):
        s.scheduled(result("1.1.1.1:80"))


def test_messages_after_abort_are_protocol_errors() -> None:
    s = Session(SessionConfig())
    s.receive(request_headers())
    assert s.abort(Outcome.CLIENT_CANCEL) == []
    with pytest.raises(RemoteProtocolError):
        s.receive(request_body(b"{}"))
