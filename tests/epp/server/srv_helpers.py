"""Shared helpers of the server tests: fakes for the scheduler and data layer, message builders, a client."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import grpc
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpBody,
    HttpHeaders,
    ProcessingRequest,
    ProcessingResponse,
)
from prometheus_client import CollectorRegistry

from epp.admission import Admitter
from epp.protocol import SessionConfig
from epp.server.metrics import RequestMetrics, StreamMetrics
from epp.server.server import EppServer, ServerSettings
from scheduler.errors import NoEndpointError
from scheduler.types import (
    Completion,
    Endpoint,
    EndpointView,
    LLMRequest,
    Metrics,
    ProfileResult,
    SchedulingResult,
    ScoredEndpoint,
)

BODY_JSON = b'{"model": "m1", "prompt": "hello world"}'
ENDPOINTS = tuple(
    Endpoint(f"10.0.0.{i}:8000", name=f"pod-{i}", metrics=Metrics(updated_at=1.0)) for i in (1, 2, 3)
)


@dataclass
class StaticSource:
    endpoints: Sequence[EndpointView] = ENDPOINTS

    def snapshot(self) -> Sequence[EndpointView]:
        return self.endpoints


@dataclass
class FakeScheduler:
    """Routes to the first ``fanout`` candidates in order; records every hook call."""

    fanout: int = 1
    calls: list[tuple[str, str, object]] = field(default_factory=list)
    fail: Exception | None = None

    def schedule(self, request: LLMRequest, endpoints: Sequence[EndpointView]) -> SchedulingResult:
        if self.fail is not None:
            raise self.fail
        if not endpoints:
            raise NoEndpointError("profile default: no candidates")
        chosen = tuple(endpoints[: self.fanout])
        targets = tuple(ScoredEndpoint(e, 1.0) for e in chosen)
        return SchedulingResult("default", chosen, {"default": ProfileResult("default", targets)})

    def dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        self.calls.append(("dispatched", request.request_id, result.addresses))

    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, status: int, headers: Mapping[str, str]
    ) -> None:
        self.calls.append(("response_headers", request.request_id, status))

    def response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None:
        self.calls.append(("chunk", request.request_id, len(chunk)))

    def completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        self.calls.append(("completed", request.request_id, completion.outcome))

    def completions(self) -> list[tuple[str, str, object]]:
        return [c for c in self.calls if c[0] == "completed"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_server(
    scheduler: FakeScheduler | None = None,
    *,
    source: StaticSource | None = None,
    registry: CollectorRegistry | None = None,
    stream_metrics: bool = False,
    **settings: object,
) -> EppServer:
    registry = registry or CollectorRegistry()
    base = {"host": "127.0.0.1", "grpc_port": 0, "grpc_health_port": 0, "metrics_port": 0}
    base.update(settings)
    return EppServer(
        ServerSettings(**base),  # type: ignore[arg-type]
        source=source or StaticSource(),
        admitter=Admitter(None, lambda: 1.0),
        scheduler=scheduler or FakeScheduler(),
        session_config=SessionConfig(max_body_bytes=int(base.get("max_body_bytes", 1 << 20))),  # type: ignore[call-overload]
        registry=registry,
        request_metrics=RequestMetrics(registry),
        config_view=lambda: {"flags": {"grpc_port": 0}},
        stream_metrics=StreamMetrics(registry) if stream_metrics else None,
    )


def request_headers(
    headers: Mapping[str, str] | None = None,
    *,
    end_of_stream: bool = False,
    body_mode: int | None = None,
    path: str = "/v1/completions",
) -> ProcessingRequest:
    all_headers = {":method": "POST", ":path": path, "content-type": "application/json"}
    all_headers.update(headers or {})
    hm = HeaderMap(headers=[HeaderValue(key=k, raw_value=v.encode()) for k, v in all_headers.items()])
    msg = ProcessingRequest(request_headers=HttpHeaders(headers=hm, end_of_stream=end_of_stream))
    if body_mode is not None:
        msg.protocol_config.request_body_mode = body_mode  # type: ignore[assignment]
        msg.protocol_config.response_body_mode = ProcessingMode.FULL_DUPLEX_STREAMED
    return msg


def request_body(body: bytes, *, end_of_stream: bool = True) -> ProcessingRequest:
    return ProcessingRequest(request_body=HttpBody(body=body, end_of_stream=end_of_stream))


def response_headers(status: int = 200, *, end_of_stream: bool = False) -> ProcessingRequest:
    hm = HeaderMap(
        headers=[
            HeaderValue(key=":status", raw_value=str(status).encode()),
            HeaderValue(key="content-type", raw_value=b"application/json"),
        ]
    )
    return ProcessingRequest(response_headers=HttpHeaders(headers=hm, end_of_stream=end_of_stream))


def response_body(body: bytes, *, end_of_stream: bool = True) -> ProcessingRequest:
    return ProcessingRequest(response_body=HttpBody(body=body, end_of_stream=end_of_stream))


def destination(resp: ProcessingResponse) -> tuple[str, str]:
    """(header value, envoy.lb metadata value) of a routing response."""
    which = resp.WhichOneof("response")
    common = getattr(resp, which).response
    header = next(
        (h.header.raw_value.decode() for h in common.header_mutation.set_headers
         if h.header.key == "x-gateway-destination-endpoint"),
        "",
    )  # fmt: skip
    md = resp.dynamic_metadata.fields["envoy.lb"].struct_value.fields["x-gateway-destination-endpoint"]
    return header, md.string_value


def stub(channel: grpc.aio.Channel) -> pb_grpc.ExternalProcessorStub:
    return pb_grpc.ExternalProcessorStub(channel)
