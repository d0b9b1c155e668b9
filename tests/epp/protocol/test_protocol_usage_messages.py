"""Table-driven tests of usage extraction, the model-name rewrite and the message builders."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from epp.protocol.messages import (
    error_body,
    header_mutation,
    headers_response,
    immediate_error,
    routing_headers_response,
    routing_metadata,
    streamed_body,
    trailers_response,
)
from epp.protocol.usage import rewrite_model_bytes, usage_from_json, usage_from_mapping, usage_from_sse
from scheduler.types import Usage


@pytest.mark.parametrize(
    "usage, expected",
    [
        ({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}, Usage(3, 4, 7, 0)),
        ({"prompt_tokens": 3, "completion_tokens": 4}, Usage(3, 4, 7, 0)),
        ({"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}, Usage(3, 0, 3, 2)),
        (
            {"input_tokens": 5, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 4}},
            Usage(5, 1, 6, 4),
        ),
        ({"prompt_tokens": -1, "completion_tokens": True, "total_tokens": "x"}, Usage(0, 0, 0, 0)),
        ({"prompt_tokens": "3", "total_tokens": "9"}, Usage(3, 0, 9, 0)),  # numeric strings, as upstream
        ({"prompt_tokens_details": None}, Usage()),
        (None, None),
        ([1], None),
    ],
)
def test_usage_from_mapping(usage: Any, expected: Usage | None) -> None:
    assert usage_from_mapping(usage) == expected


@pytest.mark.parametrize(
    "body, expected",
    [
        (b'{"usage":{"prompt_tokens":1,"completion_tokens":2}}', Usage(1, 2, 3, 0)),
        (b'{"response":{"usage":{"input_tokens":1,"output_tokens":2}}}', Usage(1, 2, 3, 0)),
        (b'{"usage":null}', None),
        (b'{"no":"usage here"}', None),
        (b'{"usage": truncated', None),
        (b'["usage"]', None),
    ],
)
def test_usage_from_json(body: bytes, expected: Usage | None) -> None:
    assert usage_from_json(body) == expected


def test_usage_from_sse_takes_the_last_report_and_skips_done_and_garbage() -> None:
    text = (
        b'data: {"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
        b'data: {"usage":{"prompt_tokens":1,"completion_tokens":5}}\r\n\r\n'
        b'data: {"usage":null}\n\n'
        b'data: {"usage": broken\n\n'
        b': comment with "usage"\n'
        b"data: [DONE]\n\n"
    )
    assert usage_from_sse(text) == Usage(1, 5, 6, 0)
    assert usage_from_sse(b"data: [DONE]\n\n") is None


@pytest.mark.parametrize(
    "data, expected",
    [
        (b'{"model":"tgt","x":1}', b'{"model":"orig","x":1}'),
        (b'{"model": "tgt"}', b'{"model": "orig"}'),
        (b'{"model":"tgt-2"}', b'{"model":"tgt-2"}'),
        (b'{"other":"tgt"}', b'{"other":"tgt"}'),
    ],
)
def test_rewrite_model_bytes(data: bytes, expected: bytes) -> None:
    out = rewrite_model_bytes(data, b'"tgt"', b'"orig"')
    assert out == expected
    if expected == data:
        assert out is data  # unchanged -> the same object (callers test identity)


def test_header_mutation_uses_raw_values_and_overwrite() -> None:
    hm = header_mutation({"a": "1"}, ["b"])
    (opt,) = hm.set_headers
    assert (opt.header.key, opt.header.raw_value, opt.header.value) == ("a", b"1", "")
    assert opt.append_action == opt.OVERWRITE_IF_EXISTS_OR_ADD
    assert list(hm.remove_headers) == ["b"]


def test_routing_metadata_shape() -> None:
    md = routing_metadata("1.1.1.1:80,2.2.2.2:80")
    assert md.fields["envoy.lb"].struct_value.fields["x-gateway-destination-endpoint"].string_value == (
        "1.1.1.1:80,2.2.2.2:80"
    )


def test_immediate_error_and_body() -> None:
    resp = immediate_error(429, "rate_limit_exceeded", "slow down", {"x-request-id": "r"})
    ir = resp.immediate_response
    assert ir.status.code == 429 and ir.details == "rate_limit_exceeded"
    assert orjson.loads(ir.body) == {"error": {"type": "rate_limit_exceeded", "message": "slow down"}}
    headers = {o.header.key: o.header.raw_value for o in ir.headers.set_headers}
    assert headers == {"content-type": b"application/json", "x-request-id": b"r"}
    assert (
        orjson.loads(error_body("t", 'quote " and \\ backslash'))["error"]["message"]
        == 'quote " and \\ backslash'
    )


@pytest.mark.parametrize("size, chunk, pieces", [(0, 4, 1), (4, 4, 1), (5, 4, 2), (12, 4, 3)])
def test_streamed_body_chunking(size: int, chunk: int, pieces: int) -> None:
    body = bytes(range(size))
    out = streamed_body("response_body", body, chunk, True)
    parts = [r.response_body.response.body_mutation.streamed_response for r in out]
    assert len(parts) == pieces
    assert b"".join(p.body for p in parts) == body
    assert [p.end_of_stream for p in parts] == [False] * (pieces - 1) + [True]
    assert not any(p.end_of_stream for r in streamed_body("request_body", body, chunk, False) for p in
                   [r.request_body.response.body_mutation.streamed_response])  # fmt: skip


def _routing(resp: Any) -> tuple[dict[str, bytes], list[str], str]:
    mutation = resp.request_headers.response.header_mutation
    headers = {o.header.key: o.header.raw_value for o in mutation.set_headers}
    lb = resp.dynamic_metadata.fields["envoy.lb"].struct_value.fields["x-gateway-destination-endpoint"]
    return headers, list(mutation.remove_headers), lb.string_value


def test_recurring_responses_are_shared_and_the_rest_built_fresh() -> None:
    dest = "10.0.0.1:8000,10.0.0.2:8000"
    plain = routing_headers_response({"x-gateway-destination-endpoint": dest}, [], dest)
    assert routing_headers_response({"x-gateway-destination-endpoint": dest}, [], dest) is plain
    assert _routing(plain) == ({"x-gateway-destination-endpoint": dest.encode()}, [], dest)
    assert plain.request_headers.response.clear_route_cache
    other = routing_headers_response({"x-gateway-destination-endpoint": "10.0.0.3:8000"}, [], "10.0.0.3:8000")
    assert other is not plain and _routing(other)[2] == "10.0.0.3:8000"
    # anything beyond the destination header: a fresh response with exactly what was asked
    extra = {"x-gateway-destination-endpoint": dest, "x-request-id": "r1"}
    first, second = routing_headers_response(extra, [], dest), routing_headers_response(extra, [], dest)
    assert first is not second and first is not plain
    assert _routing(first) == (
        {"x-gateway-destination-endpoint": dest.encode(), "x-request-id": b"r1"},
        [],
        dest,
    )
    removing = routing_headers_response(
        {"x-gateway-destination-endpoint": dest}, ["x-gateway-model-name-rewrite"], dest
    )
    assert removing is not plain and _routing(removing)[1] == ["x-gateway-model-name-rewrite"]
    overridden = routing_headers_response({"x-gateway-destination-endpoint": "elsewhere:1"}, [], dest)
    assert overridden is not plain and _routing(overridden)[0] == {
        "x-gateway-destination-endpoint": b"elsewhere:1"
    }
    # empty phase answers
    assert headers_response("response_headers") is headers_response("response_headers")
    assert headers_response("response_headers").HasField("response_headers")
    assert headers_response("request_headers") is not headers_response("response_headers")
    mutated = headers_response("response_headers", header_mutation({"a": "b"}))
    assert mutated is not headers_response("response_headers") and mutated.response_headers.response.HasField(
        "header_mutation"
    )
    assert not headers_response("response_headers").response_headers.response.HasField("header_mutation")
    assert trailers_response("response_trailers") is trailers_response("response_trailers")
    assert trailers_response("request_trailers").HasField("request_trailers")
    (last,) = streamed_body("response_body", b"", 8, True)
    assert (
        streamed_body("response_body", b"", 8, True) == [last]
        and streamed_body("response_body", b"", 8, True)[0] is last
    )
    assert last.response_body.response.body_mutation.streamed_response.end_of_stream
    (middle,) = streamed_body("response_body", b"", 8, False)
    assert (
        middle is not last and not middle.response_body.response.body_mutation.streamed_response.end_of_stream
    )
