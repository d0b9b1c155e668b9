"""ObservabilitySession: observability_mode streams driven message by message with real messages."""

from __future__ import annotations

import orjson
import pytest
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest
from extproc_messages import (
    header_map,
    request_body,
    request_headers,
    response_body,
    response_headers,
    response_trailers,
)

from epp.protocol import (
    ObservabilitySession,
    ObservabilityState,
    Observed,
    RemoteProtocolError,
    is_observability_stream,
)
from scheduler.types import Usage

SSE = "text/event-stream"


def observed(msg: ProcessingRequest) -> ProcessingRequest:
    msg.observability_mode = True
    return msg


def headers(request_id: str | None = "rid-1") -> ProcessingRequest:
    msg = request_headers({"x-request-id": request_id}, request_mode=None)  # type: ignore[dict-item]
    return observed(msg)


def sse(*events: dict[str, object]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)


def drive(*msgs: ProcessingRequest) -> tuple[ObservabilitySession, list[Observed]]:
    session = ObservabilitySession(usage_capture_bytes=1 << 20)
    out: list[Observed] = []
    for msg in msgs:
        out.extend(session.receive(msg))
    return session, out


def test_detection_reads_the_observability_flag() -> None:
    assert is_observability_stream(headers())
    assert not is_observability_stream(request_headers())


def test_sse_with_include_usage_reports_the_final_usage() -> None:
    chunks = [
        sse({"choices": [{"text": "a"}], "usage": None}),
        sse({"choices": [{"text": "b"}], "usage": None}),
        sse({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}}),
        b"data: [DONE]\n\n",
    ]
    msgs = [observed(response_body(c, eos=i == len(chunks) - 1)) for i, c in enumerate(chunks)]
    session, out = drive(headers("s-1"), observed(response_headers(200, SSE)), *msgs)
    assert session.finished
    size = sum(len(c) for c in chunks)
    assert out == [Observed("s-1", 200, True, Usage(12, 2, 14), size, True)]


def test_json_body_split_over_chunks_reports_usage_with_cached_tokens() -> None:
    doc = {
        "usage": {"prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 16}}
    }
    body = orjson.dumps({"id": "x", "choices": [{"text": "hello"}], **doc})
    _, out = drive(
        headers(),
        observed(response_headers(200)),
        observed(response_body(body[:10])),
        observed(response_body(body[10:], eos=True)),
    )
    assert out == [Observed("rid-1", 200, False, Usage(30, 5, 35, 16), len(body), True)]


def test_missing_request_id_reports_an_empty_id() -> None:
    _, out = drive(headers(None), observed(response_headers(200, eos=True)))
    assert [(o.request_id, o.status, o.usage) for o in out] == [("", 200, Usage())]


def test_error_status_reports_no_usage() -> None:
    body = orjson.dumps({"error": "x", "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
    _, out = drive(headers(), observed(response_headers(500)), observed(response_body(body, eos=True)))
    assert [(o.status, o.usage, o.response_bytes) for o in out] == [(500, Usage(), len(body))]


def test_trailers_end_the_response_and_a_grpc_error_makes_it_incomplete() -> None:
    body = sse({"usage": {"prompt_tokens": 4, "completion_tokens": 1}})
    _, out = drive(headers(), observed(response_headers(200, SSE)), observed(response_body(body)),
                   observed(response_trailers()))  # fmt: skip
    assert out[0].complete and out[0].usage == Usage(4, 1, 5)
    _, out = drive(headers(), observed(response_headers(200, SSE)), observed(response_body(body)),
                   observed(response_trailers(grpc_status="14")))  # fmt: skip
    assert not out[0].complete and out[0].usage == Usage()


def test_request_body_and_trailers_are_ignored() -> None:
    trailers = ProcessingRequest(request_trailers={"trailers": header_map({"x": "y"})})
    session, out = drive(headers(), observed(request_body(b"{}", eos=False)), observed(trailers))
    assert out == [] and session.state is ObservabilityState.REQUEST


def test_client_reset_mid_stream_reports_nothing() -> None:
    session, out = drive(
        headers(), observed(response_headers(200, SSE)), observed(response_body(b"data: {}\n"))
    )
    assert out == [] and not session.finished
    session.abort()
    session.abort()
    assert session.finished


@pytest.mark.parametrize(
    "msgs",
    [
        [response_body(b"x")],  # body before headers
        [request_headers(), request_headers()],  # two request headers
        [request_headers(), response_headers(), response_headers()],
        [request_headers(), response_headers(eos=True), response_trailers()],  # after the end
        [ProcessingRequest()],
    ],
)
def test_messages_out_of_order_are_protocol_errors(msgs: list[ProcessingRequest]) -> None:
    session = ObservabilitySession(1024)
    with pytest.raises(RemoteProtocolError, match="observability stream"):
        for msg in msgs:
            session.receive(observed(msg))


def test_response_headers_without_request_headers_are_accepted() -> None:
    _, out = drive(observed(response_headers(204, eos=True)))
    assert [(o.request_id, o.status) for o in out] == [("", 204)]
