"""The two gRPC servers: ext_proc (``--grpc-port``, TLS by default) and health (``--grpc-health-port``).

Server options, chosen for one long-lived HTTP/2 connection per Envoy worker carrying many short
streams: the receive limit is raised above the request body limit (a BUFFERED body arrives as one
message; gRPC's default is 4 MiB), ``SO_REUSEPORT`` is off unless several worker processes share the
port (otherwise two pickers started by mistake on one port would silently split the traffic), and
keepalive pings from the proxy are allowed every 10 s without data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2_grpc

from epp.server.health import HealthStatus
from epp.server.servicer import ExtProcServicer
from epp.server.tls import CertPair

__all__ = ["GrpcServers", "bind_address", "start_grpc_servers"]


def bind_address(host: str, port: int) -> str:
    """``host:port`` with IPv6 hosts bracketed."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class GrpcServers:
    """The running servers and the ports they bound (ports given as 0 are resolved here)."""

    ext_proc: grpc.aio.Server
    health: grpc.aio.Server
    port: int
    health_port: int
    certificate: CertPair | None  # None when TLS is off

    async def stop(self, grace: float | None) -> None:
        """Stop both: no new streams; in-flight ones get ``grace`` seconds, then are cancelled."""
        await self.health.stop(None)
        await self.ext_proc.stop(grace)


def _options(max_message_bytes: int, reuse_port: bool) -> Sequence[tuple[str, int]]:
    return (
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
    )


async def start_grpc_servers(
    servicer: ExtProcServicer,
    health: HealthStatus,
    *,
    host: str,
    port: int,
    health_port: int,
    credentials: grpc.ServerCredentials | None,
    certificate: CertPair | None,
    max_body_bytes: int,
    health_on_ext_proc_port: bool = False,
    reuse_port: bool = False,
) -> GrpcServers:
    """Bind and start both servers; raises OSError-like RuntimeError when a port cannot be bound."""
    limit = max_body_bytes + 1024 * 1024
    main = grpc.aio.server(options=_options(limit, reuse_port))
    pb_grpc.add_ExternalProcessorServicer_to_server(servicer, main)
    if health_on_ext_proc_port:
        health_pb2_grpc.add_HealthServicer_to_server(health.servicer, main)
    address = bind_address(host, port)
    try:
        if credentials is None:
            bound = main.add_insecure_port(address)
        else:
            bound = main.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise RuntimeError(f"--grpc-port: cannot listen on {address}: {exc}") from None
    side = grpc.aio.server(options=_options(64 * 1024, False))
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, side)
    health_address = bind_address(host, health_port)
    try:
        health_bound = side.add_insecure_port(health_address)
    except RuntimeError as exc:
        raise RuntimeError(f"--grpc-health-port: cannot listen on {health_address}: {exc}") from None
    await side.start()
    await main.start()
    return GrpcServers(main, side, bound, health_bound, certificate)
