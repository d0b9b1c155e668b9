"""Observability streams on the real server (both engines): usage reported off the routing stream counts."""

from __future__ import annotations

import grpc
import orjson
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import HttpHeaders, ProcessingRequest
from prometheus_client import CollectorRegistry
from srv_helpers import (
    FakeScheduler,
    request_body,
    request_headers,
    response_body,
    response_headers,
    stub,
)
from testutil import eventually

from epp.server.server import EppServer
from scheduler.types import Outcome

BODY = orjson.dumps({"model": "m1", "prompt": "hello world"})
USAGE = {
    "prompt_tokens": 11,
    "completion_tokens": 4,
    "total_tokens": 15,
    "prompt_tokens_details": {"cached_tokens": 8},
}
LABELS = {"model_name": "m1", "target_model_name": "m1"}


def metric(registry: CollectorRegistry, name: str) -> float:
    return registry.get_sample_value(name, LABELS) or 0.0


def observability_msg(msg: ProcessingRequest) -> ProcessingRequest:
    msg.observability_mode = True
    return msg


async def route(channel: grpc.aio.Channel, request_id: str, response_mode: int) -> None:
    """A routing stream up to its response headers (its response body is sent only if ``response_mode``)."""
    call = stub(channel).Process()
    first = request_headers({"x-request-id": request_id}, body_mode=ProcessingMode.FULL_DUPLEX_STREAMED)
    first.protocol_config.response_body_mode = response_mode  # type: ignore[assignment]
    await call.write(first)
    await call.write(request_body(BODY))
    await call.read()  # routing headers response
    await call.read()  # the body
    await call.write(response_headers(200, end_of_stream=False))
    await call.read()
    if response_mode != ProcessingMode.NONE:
        await call.write(response_body(orjson.dumps({"usage": USAGE})))
        await call.read()
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF


async def observe(channel: grpc.aio.Channel, request_id: str | None, body: bytes, status: int = 200) -> None:
    """An observability stream: request headers, response headers, body; the server answers nothing."""
    call = stub(channel).Process()
    headers = {":method": "POST", ":path": "/v1/completions"}
    if request_id is not None:
        headers["x-request-id"] = request_id
    hm = HeaderMap(headers=[HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()])
    await call.write(observability_msg(ProcessingRequest(request_headers=HttpHeaders(headers=hm))))
    await call.write(observability_msg(response_headers(status)))
    await call.write(observability_msg(response_body(body[:5], end_of_stream=False)))
    await call.write(observability_msg(response_body(body[5:])))
    assert await call.read() is grpc.aio.EOF  # closed with OK, no response written
    assert await call.code() == grpc.StatusCode.OK


async def test_observability_usage_is_counted_once_against_the_routed_request(
    channel: grpc.aio.Channel, server: EppServer, sched: FakeScheduler, registry: CollectorRegistry
) -> None:
    await route(channel, "obs-1", ProcessingMode.NONE)
    await eventually(lambda: len(sched.completions()) == 1)
    assert sched.completions() == [("completed", "obs-1", Outcome.OK)]
    assert len(server.core.correlation.awaiting) == 1
    assert metric(registry, "inference_objective_response_sizes_count") == 0
    body = orjson.dumps({"choices": [], "usage": USAGE})
    await observe(channel, "obs-1", body)
    await eventually(lambda: server.core.correlation.observations == 1)
    assert metric(registry, "inference_objective_input_tokens_sum") == 11
    assert metric(registry, "inference_objective_output_tokens_sum") == 4
    assert metric(registry, "inference_objective_prompt_cached_tokens_sum") == 8
    assert metric(registry, "inference_objective_response_sizes_sum") == len(body)
    assert metric(registry, "inference_objective_normalized_time_per_output_token_seconds_count") == 1
    assert metric(registry, "inference_objective_request_duration_seconds_count") == 1
    assert len(server.core.correlation.awaiting) == 0
    assert len(sched.completions()) == 1  # the observability stream fires no scheduler hooks
    assert server.core.active_streams == 0


async def test_unknown_or_missing_request_id_counts_nothing(
    channel: grpc.aio.Channel, server: EppServer, registry: CollectorRegistry
) -> None:
    body = orjson.dumps({"usage": USAGE})
    await observe(channel, "never-routed", body)
    await observe(channel, None, body)
    await eventually(lambda: server.core.correlation.unmatched_observations == 2)
    assert metric(registry, "inference_objective_input_tokens_count") == 0


async def test_observed_error_response_counts_no_usage(
    channel: grpc.aio.Channel, server: EppServer, registry: CollectorRegistry
) -> None:
    await route(channel, "obs-err", ProcessingMode.NONE)
    await observe(channel, "obs-err", orjson.dumps({"usage": USAGE}), status=500)
    await eventually(lambda: server.core.correlation.observations == 1)
    assert metric(registry, "inference_objective_input_tokens_count") == 0


async def test_routing_stream_that_sees_the_body_is_not_awaited(
    channel: grpc.aio.Channel, server: EppServer, registry: CollectorRegistry
) -> None:
    """The GIE config (no observability stream): the routing stream records usage, nothing is registered."""
    await route(channel, "gie-1", ProcessingMode.FULL_DUPLEX_STREAMED)
    await eventually(lambda: metric(registry, "inference_objective_input_tokens_count") == 1)
    assert len(server.core.correlation.awaiting) == 0
    await observe(channel, "gie-1", orjson.dumps({"usage": USAGE}))
    await eventually(lambda: server.core.correlation.unmatched_observations == 1)
    assert metric(registry, "inference_objective_input_tokens_sum") == 11


async def test_observability_stream_reset_mid_response_counts_nothing(
    channel: grpc.aio.Channel, server: EppServer, registry: CollectorRegistry
) -> None:
    await route(channel, "obs-reset", ProcessingMode.NONE)
    call = stub(channel).Process()
    await call.write(observability_msg(request_headers({"x-request-id": "obs-reset"})))
    await call.write(observability_msg(response_headers(200)))
    await call.write(observability_msg(response_body(b'{"usage":', end_of_stream=False)))
    call.cancel()
    await eventually(lambda: server.core.active_streams == 0)
    assert server.core.correlation.observations == 0
    assert metric(registry, "inference_objective_input_tokens_count") == 0


async def _route_without_response(channel: grpc.aio.Channel, request_id: str) -> grpc.aio.StreamStreamCall:
    """A routing stream as in the shipped ``observability`` config: no response phase at all."""
    call = stub(channel).Process()
    first = request_headers({"x-request-id": request_id}, body_mode=ProcessingMode.FULL_DUPLEX_STREAMED)
    first.protocol_config.response_body_mode = ProcessingMode.NONE  # type: ignore[assignment]
    await call.write(first)
    await call.write(request_body(BODY))
    await call.read()
    await call.read()
    return call


async def test_routing_stream_closed_after_routing_defers_its_completion_to_the_observability_stream(
    channel: grpc.aio.Channel, server: EppServer, sched: FakeScheduler, registry: CollectorRegistry
) -> None:
    await observe(channel, "warm-up", b"{}" * 4)  # the server has now seen an observability stream
    call = await _route_without_response(channel, "deferred")
    call.cancel()  # Envoy resets the routing stream once the request phase is done
    await eventually(lambda: server.core.active_streams == 0)
    assert sched.completions() == []  # deferred: the request is still in flight
    body = orjson.dumps({"usage": USAGE})
    await observe(channel, "deferred", body)
    await eventually(lambda: len(sched.completions()) == 1)
    assert sched.completions() == [("completed", "deferred", Outcome.OK)]
    assert metric(registry, "inference_objective_input_tokens_sum") == 11
    assert metric(registry, "inference_objective_response_sizes_sum") == len(body)
    assert metric(registry, "inference_objective_request_duration_seconds_count") == 1
    assert registry.get_sample_value("inference_objective_running_requests", {"model_name": "m1"}) == 0
    assert not registry.get_sample_value(
        "inference_objective_request_error_total", {**LABELS, "error_code": "Unknown"}
    )


async def test_deferred_completion_keeps_its_outcome_when_the_observability_stream_is_cut_off(
    channel: grpc.aio.Channel, server: EppServer, sched: FakeScheduler
) -> None:
    await observe(channel, "warm-up", b"{}" * 4)
    call = await _route_without_response(channel, "cut")
    call.cancel()
    await eventually(lambda: server.core.active_streams == 0)
    obs = stub(channel).Process()
    await obs.write(observability_msg(request_headers({"x-request-id": "cut"})))
    await obs.write(observability_msg(response_headers(200)))
    await obs.done_writing()  # the observability stream ends before its response did
    assert await obs.read() is grpc.aio.EOF
    await eventually(lambda: len(sched.completions()) == 1)
    assert sched.completions() == [("completed", "cut", Outcome.STREAM_RESET)]


async def test_without_any_observability_stream_the_routing_stream_completes_at_once(
    channel: grpc.aio.Channel, sched: FakeScheduler
) -> None:
    call = await _route_without_response(channel, "alone")
    call.cancel()
    await eventually(lambda: len(sched.completions()) == 1)
    assert sched.completions() == [("completed", "alone", Outcome.STREAM_RESET)]
