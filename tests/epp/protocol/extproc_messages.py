"""Builders of real ext_proc ProcessingRequest messages and readers of responses, for protocol tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue, Metadata
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpBody,
    HttpHeaders,
    HttpTrailers,
    ProcessingRequest,
    ProcessingResponse,
    ProtocolConfiguration,
)
from google.protobuf.struct_pb2 import Struct

from scheduler.types import Endpoint, SchedulingResult

FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = ProcessingMode.BUFFERED


def header_map(headers: Mapping[str, str], raw: bool = True) -> HeaderMap:
    return HeaderMap(
        headers=[
            HeaderValue(key=k, raw_value=v.encode()) if raw else HeaderValue(key=k, value=v)
            for k, v in headers.items()
        ]
    )


def metadata(namespaces: Mapping[str, Mapping[str, Any]]) -> Metadata:
    md = Metadata()
    for ns, fields in namespaces.items():
        s = Struct()
        s.update(dict(fields))
        md.filter_metadata[ns].CopyFrom(s)
    return md


def request_headers(
    headers: Mapping[str, str] | None = None,
    *,
    path: str = "/v1/completions",
    eos: bool = False,
    request_mode: int | None = FULL_DUPLEX,
    response_mode: int = FULL_DUPLEX,
    md: Metadata | None = None,
    raw: bool = True,
) -> ProcessingRequest:
    all_headers = {":method": "POST", ":path": path, ":authority": "gw", "x-request-id": "rid-1"}
    all_headers.update(headers or {})
    all_headers = {k: v for k, v in all_headers.items() if v is not None}
    config = (
        None
        if request_mode is None
        else ProtocolConfiguration(request_body_mode=request_mode, response_body_mode=response_mode)  # type: ignore[arg-type]
    )
    return ProcessingRequest(
        request_headers=HttpHeaders(headers=header_map(all_headers, raw), end_of_stream=eos),
        metadata_context=md,
        protocol_config=config,
    )


def request_body(data: bytes, eos: bool = True) -> ProcessingRequest:
    return ProcessingRequest(request_body=HttpBody(body=data, end_of_stream=eos))


def request_trailers() -> ProcessingRequest:
    return ProcessingRequest(request_trailers=HttpTrailers(trailers=header_map({})))


def response_headers(
    status: int = 200,
    content_type: str = "application/json",
    eos: bool = False,
    md: Metadata | None = None,
    **extra: str,
) -> ProcessingRequest:
    headers = {":status": str(status), "content-type": content_type}
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return ProcessingRequest(
        response_headers=HttpHeaders(headers=header_map(headers), end_of_stream=eos), metadata_context=md
    )


def response_body(data: bytes, eos: bool = False, md: Metadata | None = None) -> ProcessingRequest:
    return ProcessingRequest(response_body=HttpBody(body=data, end_of_stream=eos), metadata_context=md)


def response_trailers(md: Metadata | None = None, grpc_status: str = "0") -> ProcessingRequest:
    trailers = HttpTrailers(trailers=header_map({"grpc-status": grpc_status}))
    return ProcessingRequest(response_trailers=trailers, metadata_context=md)


def result(*addresses: str, headers: Mapping[str, str] | None = None) -> SchedulingResult:
    return SchedulingResult(
        primary_profile="default",
        endpoints=tuple(Endpoint(address=a) for a in addresses),
        profile_results={},
        headers=dict(headers or {}),
    )


def set_headers(resp: ProcessingResponse, phase: str) -> dict[str, str]:
    common = getattr(resp, phase).response
    options = common.header_mutation.set_headers
    return {o.header.key: o.header.raw_value.decode() or o.header.value for o in options}


def removed_headers(resp: ProcessingResponse, phase: str) -> list[str]:
    return list(getattr(resp, phase).response.header_mutation.remove_headers)


def streamed_chunks(responses: Sequence[ProcessingResponse], phase: str) -> list[tuple[bytes, bool]]:
    out = []
    for r in responses:
        assert r.WhichOneof("response") == phase, r
        s = getattr(r, phase).response.body_mutation.streamed_response
        out.append((s.body, s.end_of_stream))
    return out


def lb_metadata(resp: ProcessingResponse) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(resp.dynamic_metadata)
