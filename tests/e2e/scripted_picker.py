"""A scripted ext_proc server for testing Envoy configuration mechanics in isolation from the picker.

It speaks the endpoint-picker protocol as the Go EPP does for FULL_DUPLEX_STREAMED request bodies
(deferred headers response with ``x-gateway-destination-endpoint`` + ``envoy.lb`` metadata, then the
body echoed as StreamedBodyResponse chunks), and for BUFFERED ones (the routing in the BodyResponse),
but the destination is a fixed string given on the command line instead of a scheduling decision, so
a test can make Envoy try an endpoint that is down first (fallback retries) regardless of what a real
picker would choose. Response messages are echoed back
unchanged. Every request it routed is appended as one line to ``--log`` (the destination it set).

Run: ``python tests/e2e/scripted_picker.py --port P --destination 127.0.0.1:1,127.0.0.1:8000 --log F``.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from envoy.config.core.v3.base_pb2 import HeaderValue, HeaderValueOption
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf.struct_pb2 import Struct

__all__ = ["ScriptedPicker", "main"]

_HEADER = "x-gateway-destination-endpoint"


class ScriptedPicker(pb_grpc.ExternalProcessorServicer):
    def __init__(self, destination: str, log: Path) -> None:
        self._destination = destination
        self._log = log

    def _route(self) -> pb.ProcessingResponse:
        with self._log.open("a", encoding="utf-8") as f:
            f.write(self._destination + "\n")
        mutation = pb.HeaderMutation(
            set_headers=[
                HeaderValueOption(header=HeaderValue(key=_HEADER, raw_value=self._destination.encode()))
            ]
        )
        metadata = Struct()
        metadata.update({"envoy.lb": {_HEADER: self._destination}})
        return pb.ProcessingResponse(
            request_headers=pb.HeadersResponse(
                response=pb.CommonResponse(header_mutation=mutation, clear_route_cache=True)
            ),
            dynamic_metadata=metadata,
        )

    async def Process(
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ProcessingResponse]:
        body: list[bytes] = []
        buffered = False
        async for msg in request_iterator:
            kind = msg.WhichOneof("request")
            if msg.HasField("protocol_config"):
                buffered = msg.protocol_config.request_body_mode == ProcessingMode.BUFFERED
            if kind == "request_headers":
                if msg.request_headers.end_of_stream:
                    yield self._route()
                elif buffered:
                    yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
            elif kind == "request_body" and buffered:
                routed = self._route()
                yield pb.ProcessingResponse(
                    request_body=pb.BodyResponse(response=routed.request_headers.response),
                    dynamic_metadata=routed.dynamic_metadata,
                )
            elif kind == "request_body":
                body.append(msg.request_body.body)
                if msg.request_body.end_of_stream:
                    yield self._route()
                    streamed = pb.StreamedBodyResponse(body=b"".join(body), end_of_stream=True)
                    yield pb.ProcessingResponse(
                        request_body=pb.BodyResponse(
                            response=pb.CommonResponse(
                                body_mutation=pb.BodyMutation(streamed_response=streamed)
                            )
                        )
                    )
            elif kind == "request_trailers":
                yield pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
            elif kind == "response_headers":
                yield pb.ProcessingResponse(response_headers=pb.HeadersResponse())
            elif kind == "response_body":
                chunk = msg.response_body
                streamed = pb.StreamedBodyResponse(body=chunk.body, end_of_stream=chunk.end_of_stream)
                yield pb.ProcessingResponse(
                    response_body=pb.BodyResponse(
                        response=pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=streamed))
                    )
                )
            elif kind == "response_trailers":
                yield pb.ProcessingResponse(response_trailers=pb.TrailersResponse())


async def _serve(port: int, destination: str, log: Path) -> None:
    server = grpc.aio.server()
    pb_grpc.add_ExternalProcessorServicer_to_server(ScriptedPicker(destination, log), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--destination", required=True)
    p.add_argument("--log", type=Path, required=True)
    ns = p.parse_args()
    asyncio.run(_serve(ns.port, ns.destination, ns.log))


if __name__ == "__main__":
    main()
