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

from epp.server.h2.limits import H2Limits
from epp.server.health import HealthStatus
from epp.server.servicer import ExtProcServicer

__all__ = ["bind_address", "grpc_core_limits", "start_ext_proc_server", "start_health_server"]


def bind_address(host: str, port: int) -> str:
    """``host:port`` with IPv6 hosts bracketed."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _options(
    max_message_bytes: int, reuse_port: bool, max_send_bytes: int = -1, limits: H2Limits | None = None
) -> Sequence[tuple[str, int]]:
    base = (
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_send_bytes),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
    )
    if limits is None:
        return base
    return base + grpc_core_limits(limits)


def grpc_core_limits(limits: H2Limits) -> tuple[tuple[str, int], ...]:
    """The ``--grpc-h2-*`` limits that grpc-core has an equivalent of, as its channel arguments.

    ``max_concurrent_streams`` is advertised as SETTINGS_MAX_CONCURRENT_STREAMS and enforced (grpc-core
    refuses a stream beyond it), ``max_header_list_size`` is grpc-core's hard metadata limit (the soft
    one, over which it rejects a random share of requests, is set to the same), the settings timeout
    bounds the TLS/HTTP/2 handshake and ``idle_timeout`` closes a connection without a call (0: never).
    The receive windows, the connection budget, the flood rate and the write buffer have none: grpc-core
    sizes its windows itself (BDP probing) and polices PINGs with its own strikes."""
    idle_ms = round(limits.idle_timeout * 1000) if limits.idle_timeout > 0 else 2**31 - 1
    return (
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
        ("grpc.absolute_max_metadata_size", limits.max_header_list_size),
        ("grpc.max_metadata_size", limits.max_header_list_size),
        ("grpc.server_handshake_timeout_ms", round(limits.settings_timeout * 1000)),
        ("grpc.max_connection_idle_ms", min(idle_ms, 2**31 - 1)),
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
    limits: H2Limits | None = None,
) -> tuple[grpc.aio.Server, int]:
    """The grpc.aio ext_proc server (with the health service too when ``health`` is given).

    ``max_recv_bytes`` 0: ``max_body_bytes`` + 1 MiB; ``max_send_bytes`` 0: no limit; ``limits``: the
    ``--grpc-h2-*`` limits grpc-core has an equivalent of (:func:`grpc_core_limits`; default: their
    defaults)."""
    recv = max_recv_bytes or max_body_bytes + 1024 * 1024
    server = grpc.aio.server(options=_options(recv, reuse_port, max_send_bytes or -1, limits or H2Limits()))
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
