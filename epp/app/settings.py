"""Server settings from the flags: ports, TLS material (generated or read now), the metrics token,
diagnostics; and the debug endpoint's configuration view. Every problem raises
:class:`~epp.app.errors.StartupError` naming the flag."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from epp.app.errors import StartupError
from epp.config.options import Options
from epp.server.http import MetricsTls
from epp.server.server import ServerSettings
from epp.server.tls import (
    TlsError,
    apply_tls_overrides,
    load_certificate,
    read_client_ca,
    server_credentials,
)
from scheduler.config.resolved import ResolvedConfig

__all__ = ["config_view", "server_settings"]


def _read_token(options: Options) -> str | None:
    if not options.metrics_endpoint_auth or options.metrics_bearer_token_file is None:
        return None
    path = options.metrics_bearer_token_file
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise StartupError(f"--metrics-bearer-token-file {path}: cannot read ({exc.strerror})") from None
    if not token:
        raise StartupError(f"--metrics-bearer-token-file {path}: the file is empty")
    return token


def config_view(options: Options, config: ResolvedConfig) -> Callable[[], Mapping[str, Any]]:
    """What the debug endpoint shows of the configuration: every flag (``--config-text`` only as
    ``(set)``), the resolved configuration and where it came from; computed once, here."""
    flags = {k: getattr(options, k) for k in options.__slots__}
    flags["config_text"] = "(set)" if options.config_text else None
    view = {"flags": flags, "config": config.to_dict(), "source": config.source}
    return lambda: view


def server_settings(options: Options) -> ServerSettings:
    """Ports, TLS material (generated or read now), token, diagnostics. Raises StartupError."""
    credentials, certificate, reload_from, client_ca = None, None, None, None
    if options.secure_serving:
        hosts = [socket.gethostname()]
        if options.grpc_client_ca_file is not None:
            try:
                client_ca = read_client_ca(options.grpc_client_ca_file)
            except TlsError as exc:
                raise StartupError(f"--grpc-client-ca-file: {exc}") from None
        try:
            if options.grpc_engine in ("h2", "ngh2"):  # ssl module contexts (epp.server.h2.server)
                certificate, reload_from = load_certificate(
                    cert_path=options.cert_path, reload=options.enable_cert_reload, hosts=hosts
                )
            else:
                credentials, certificate = server_credentials(
                    cert_path=options.cert_path,
                    reload=options.enable_cert_reload,
                    hosts=hosts,
                    client_ca=client_ca,
                )
        except TlsError as exc:
            raise StartupError(f"--cert-path: {exc}") from None
        try:  # check now that this OpenSSL can offer what --tls-min-version / --tls-cipher-suites ask
            apply_tls_overrides(
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), options.tls_min_version, options.tls_cipher_suites
            )
        except TlsError as exc:
            raise StartupError(f"--tls-cipher-suites: {exc}") from None
    metrics_tls = None
    if options.metrics_cert_dir is not None:
        try:
            metrics_tls = MetricsTls(options.metrics_cert_dir, options.metrics_client_ca_file)
        except TlsError as exc:
            raise StartupError(f"--metrics-cert-dir: {exc}") from None
    return ServerSettings(
        host=options.host,
        grpc_port=options.grpc_port,
        grpc_health_port=options.grpc_health_port,
        metrics_port=options.metrics_port,
        credentials=credentials,
        certificate=certificate,
        reload_from=reload_from,
        client_ca=client_ca,
        engine=options.grpc_engine,
        max_body_bytes=options.max_body_bytes,
        health_on_ext_proc_port=options.health_checking,
        leader_election=options.ha_enable_leader_election,
        shutdown_grace=options.drain_timeout,
        max_recv_bytes=options.grpc_max_recv_msg_size,
        max_send_bytes=options.grpc_max_send_msg_size,
        h2_limits=options.h2_limits,
        tls_min_version=options.tls_min_version,
        tls_cipher_suites=options.tls_cipher_suites,
        metrics_tls=metrics_tls,
        verbosity=options.verbosity,
        tracing=options.tracing,
        metrics_token=_read_token(options),
    )
