"""The real ext_proc server in-process, driven by a grpc.aio client with real ProcessingRequest messages."""

from __future__ import annotations

import asyncio

import grpc
import orjson
import pytest
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest
from srv_helpers import (
    FakeScheduler,
    StaticSource,
    destination,
    make_server,
    request_body,
    request_headers,
    response_body,
    response_headers,
    stub,
)
from testutil import eventually

from epp.server.server import EppServer
from scheduler.types import Outcome

BODY = BODY_JSON = orjson.dumps({"model": "m1", "prompt": "hello world " * 80})


async def test_full_duplex_request_routes_and_completes(
    channel: grpc.aio.Channel, sched: FakeScheduler, server: EppServer
) -> None:
    call = stub(channel).Process()
    await call.write(request_headers({"x-request-id": "r1", "x-gateway-inference-objective": "gold"}))
    await call.write(request_body(BODY[:100], end_of_stream=False))
    await call.write(request_body(BODY[100:]))
    routed = await call.read()
    assert routed.WhichOneof("response") == "request_headers"
    assert destination(routed) == ("10.0.0.1:8000", "10.0.0.1:8000")
    assert routed.request_headers.response.clear_route_cache
    assert "x-gateway-inference-objective" in routed.request_headers.response.header_mutation.remove_headers
    body = await call.read()
    streamed = body.request_body.response.body_mutation.streamed_response
    assert streamed.body == BODY and streamed.end_of_stream
    await call.write(response_headers(200))
    assert (await call.read()).WhichOneof("response") == "response_headers"
    usage = {"usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}
    await call.write(response_body(orjson.dumps(usage)))
    out = await call.read()
    assert out.response_body.response.body_mutation.streamed_response.end_of_stream
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    await eventually(lambda: len(sched.completions()) == 1)
    assert [c[0] for c in sched.calls] == ["dispatched", "response_headers", "completed"]
    assert sched.completions() == [("completed", "r1", Outcome.OK)]
    assert server.decisions.last(1)[0]["endpoints"] == ["10.0.0.1:8000"]


async def test_buffered_mode_routes_in_body_response(channel: grpc.aio.Channel, sched: FakeScheduler) -> None:
    sched.fanout = 2
    call = stub(channel).Process()
    await call.write(request_headers(body_mode=ProcessingMode.BUFFERED))
    assert (await call.read()).WhichOneof("response") == "request_headers"
    await call.write(request_body(BODY))
    routed = await call.read()
    assert routed.WhichOneof("response") == "request_body"
    assert destination(routed) == ("10.0.0.1:8000,10.0.0.2:8000",) * 2
    call.cancel()


async def test_header_only_request_is_routed(channel: grpc.aio.Channel) -> None:
    call = stub(channel).Process()
    await call.write(request_headers(end_of_stream=True, path="/v1/models", headers={":method": "GET"}))
    routed = await call.read()
    assert destination(routed)[0] == "10.0.0.1:8000"
    call.cancel()


@pytest.mark.parametrize(
    ("body", "status", "error_type"),
    [
        (b"not json", 400, "invalid_request_error"),
        (b'{"prompt": "x"}', 400, "invalid_request_error"),
    ],
)
async def test_bad_bodies_get_json_errors(
    channel: grpc.aio.Channel, server: EppServer, body: bytes, status: int, error_type: str
) -> None:
    call = stub(channel).Process()
    await call.write(request_headers())
    await call.write(request_body(body))
    resp = await call.read()
    immediate = resp.immediate_response
    assert immediate.status.code == status
    error = orjson.loads(immediate.body)["error"]
    assert error["type"] == error_type and error["message"]
    assert any(h.header.key == "content-type" and h.header.raw_value == b"application/json"
               for h in immediate.headers.set_headers)  # fmt: skip
    call.cancel()
    # the JSON body keeps its type; the metric's error_code is upstream's (BadRequest for a 400)
    value = server.registry.get_sample_value(
        "inference_objective_request_error_total",
        {"model_name": "", "target_model_name": "", "error_code": "BadRequest"},
    )
    assert value == 1.0
    value = server.registry.get_sample_value(
        "llm_d_epp_request_error_total",
        {"model_name": "", "target_model_name": "", "fairness_id": "default-flow", "priority": "0",
         "error_code": "BadRequest"},
    )  # fmt: skip
    assert value == 1.0


async def test_empty_pool_is_503_or_500_without_body_bug_is_500(sched: FakeScheduler, engine: str) -> None:
    srv = make_server(sched, source=StaticSource(()), engine=engine)
    await srv.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{srv.grpc_port}") as ch:
            call = stub(ch).Process()
            await call.write(request_headers())
            await call.write(request_body(BODY))
            assert (await call.read()).immediate_response.status.code == 503
            call.cancel()
            # GIE's hermetic "no backend pods available": a header-only request on an empty pool -> 500
            call = stub(ch).Process()
            get = {":method": "GET"}
            await call.write(request_headers(end_of_stream=True, path="/v1/models", headers=get))
            resp = (await call.read()).immediate_response
            assert resp.status.code == 500
            assert orjson.loads(resp.body)["error"] == {
                "type": "internal_error",
                "message": "no endpoints available in the pool",
            }
            call.cancel()
            srv.source.endpoints = StaticSource().endpoints  # type: ignore[attr-defined]
            sched.fail = ZeroDivisionError("bug")
            call = stub(ch).Process()
            await call.write(request_headers())
            await call.write(request_body(BODY))
            resp = (await call.read()).immediate_response
            assert resp.status.code == 500
            assert orjson.loads(resp.body)["error"]["type"] == "internal_error"
            call.cancel()
    finally:
        await srv.shutdown(grace=0)
    assert sched.completions() == []


async def test_protocol_violation_ends_stream_with_grpc_error(channel: grpc.aio.Channel) -> None:
    call = stub(channel).Process()
    await call.write(request_body(BODY))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def _dispatch(channel: grpc.aio.Channel, request_id: str) -> grpc.aio.StreamStreamCall:
    call = stub(channel).Process()
    await call.write(request_headers({"x-request-id": request_id}))
    await call.write(request_body(BODY))
    await call.read()
    await call.read()
    return call


async def test_client_reset_fires_completion_once_with_stream_reset(
    channel: grpc.aio.Channel, sched: FakeScheduler, server: EppServer
) -> None:
    call = await _dispatch(channel, "reset-me")
    call.cancel()
    await eventually(lambda: len(sched.completions()) == 1)
    await asyncio.sleep(0.05)
    assert sched.completions() == [("completed", "reset-me", Outcome.STREAM_RESET)]
    assert server.servicer.active_streams == 0


async def test_half_close_before_response_is_client_cancel(
    channel: grpc.aio.Channel, sched: FakeScheduler
) -> None:
    call = await _dispatch(channel, "gone")
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    await eventually(lambda: len(sched.completions()) == 1)
    assert sched.completions() == [("completed", "gone", Outcome.CLIENT_CANCEL)]


async def test_upstream_error_status_is_reported(channel: grpc.aio.Channel, sched: FakeScheduler) -> None:
    call = await _dispatch(channel, "upstream")
    await call.write(response_headers(503, end_of_stream=True))
    await call.read()
    await call.done_writing()
    await eventually(lambda: len(sched.completions()) == 1)
    assert sched.completions() == [("completed", "upstream", Outcome.UPSTREAM_ERROR)]


async def test_many_concurrent_streams_each_complete_once(
    channel: grpc.aio.Channel, sched: FakeScheduler
) -> None:
    async def one(i: int) -> None:
        call = await _dispatch(channel, f"c{i}")
        await call.write(response_headers(200))
        await call.read()
        await call.write(response_body(b"{}"))
        await call.read()
        await call.done_writing()
        await call.read()

    await asyncio.gather(*(one(i) for i in range(40)))
    await eventually(lambda: len(sched.completions()) == 40)
    assert sorted(c[1] for c in sched.completions()) == sorted(f"c{i}" for i in range(40))
    assert {c[2] for c in sched.completions()} == {Outcome.OK}


def test_processing_request_is_the_real_message() -> None:
    assert isinstance(request_headers(), ProcessingRequest)
