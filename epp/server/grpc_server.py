"""grpc.aio servers: ext_proc (``--grpc-port``, TLS by default) and health (``--grpc-health-port``).

Server options, chosen for one long-lived HTTP/2 connection per Envoy worker carrying many short
streams: the receive limit is raised above the request body limit (a BUFFERED body arrives as one
message; gRPC's default is 4 MiB) unless ``--grpc-max-recv-msg-size`` sets it, the send limit is
``--grpc-max-send-msg-size`` (none by default), ``SO_REUSEPORT`` is off unless several worker
processes share the port (otherwise two pickers started by mistake on one port would silently split
the traffic), and keepalive pings from the proxy are allowed every 10 s without data.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2_grpc

from epp.server.health import HealthStatus
from epp.server.servicer import ExtProcServicer

__all__ = ["bind_address", "start_ext_proc_server", "start_health_server"]


def bind_address(host: str, port: int) -> str:
    """``host:port`` with IPv6 hosts bracketed."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _options(max_message_bytes: int, reuse_port: bool, max_send_bytes: int = -1) -> Sequence[tuple[str, int]]:
    return (
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_send_bytes),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
    )


async def start_ext_proc_server(
    servicer: ExtProcServicer,
    health: HealthStatus | None,
    *,
    host: str,
    port: int,
    credentials: grpc.ServerCredentials | None,
    max_body_bytes: int,
    reuse_port: bool = False,
    max_recv_bytes: int = 0,
    max_send_bytes: int = 0,
) -> tuple[grpc.aio.Server, int]:
    """The grpc.aio ext_proc server (with the health service too when ``health`` is given).

    ``max_recv_bytes`` 0: ``max_body_bytes`` + 1 MiB; ``max_send_bytes`` 0: no limit."""
    recv = max_recv_bytes or max_body_bytes + 1024 * 1024
    server = grpc.aio.server(options=_options(recv, reuse_port, max_send_bytes or -1))
    pb_grpc.add_ExternalProcessorServicer_to_server(servicer, server)
    if health is not None:
        health_pb2_grpc.add_HealthServicer_to_server(health.ext_proc_port_servicer, server)
    address = bind_address(host, port)
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise RuntimeError(f"--grpc-port: cannot listen on {address}: {exc}") from None
    await server.start()
    return server, bound


async def start_health_server(health: HealthStatus, *, host: str, port: int) -> tuple[grpc.aio.Server, int]:
    """The plaintext grpc.health.v1 server of ``--grpc-health-port``."""
    server = grpc.aio.server(options=_options(64 * 1024, False))
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)
    address = bind_address(host, port)
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise RuntimeError(f"--grpc-health-port: cannot listen on {address}: {exc}") from None
    await server.start()
    return server, bound
