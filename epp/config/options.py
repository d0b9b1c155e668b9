"""Command-line options of the ``epp`` server: GIE-compatible names, defaults and validation.

:func:`parse_options` turns an argument list into a frozen :class:`Options` or raises
:class:`UsageError` (the CLI prints it and exits with status 2). Flag names, defaults and Go value syntax
(durations such as ``50ms``, ``--secure-serving=false``, ``-v=3``) follow the Go endpoint picker, so a
Helm chart written for it passes its arguments unchanged; flags of ours are marked in their help text.

Discovery modes are exclusive: exactly one of ``--endpoints``, ``--endpoints-file``, ``--pool-name``,
``--endpoint-selector`` (the latter needs ``--endpoint-target-ports``), or none of them with a
configuration whose ``dataLayer.discovery`` names the discovery plugin (checked when it loads).
``--endpoints-resolve-interval`` and ``--endpoints-hosts-file`` apply to the first two only (they may
name hosts).

The flag definitions are in :mod:`epp.config.parser` (:func:`build_parser`, :class:`UsageError` and
:data:`ENGINES` are re-exported here).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from datalayer.discovery import parse_endpoint_list as parse_addresses
from epp.config.flags import normalise_argv
from epp.config.parser import ENGINES, METRIC_FLAGS, UsageError, build_parser, long_flags
from epp.kubernetes.label_selector import parse_label_selector
from epp.server.h2.limits import H2Limits
from epp.server.h2.limits import from_flags as h2_limits_from_flags
from epp.server.tls import TLS_VERSIONS, TlsError, openssl_ciphers

__all__ = [
    "ENGINES",
    "NO_ENDPOINTS",
    "Options",
    "UsageError",
    "build_parser",
    "parse_endpoint_list",
    "parse_options",
]


@dataclass(frozen=True, slots=True)
class Options:
    """Every setting of the server process, after parsing and validation (times in seconds)."""

    # serving
    host: str = "0.0.0.0"
    grpc_port: int = 9002
    grpc_health_port: int = 9003
    metrics_port: int = 9090
    secure_serving: bool = True
    cert_path: str | None = None
    enable_cert_reload: bool = False
    grpc_client_ca_file: str | None = None  # ours: mutual TLS on the ext_proc port
    health_checking: bool = False
    grpc_engine: str = "h2"
    drain_timeout: float = 30.0
    max_body_bytes: int = 16 * 1024 * 1024
    grpc_max_recv_msg_size: int = 0  # 0: our default (max_body_bytes + 1 MiB)
    grpc_max_send_msg_size: int = 0  # 0: no limit (grpc-go's default)
    h2_limits: H2Limits = field(default_factory=H2Limits)  # --grpc-h2-* (h2 engine's defensive limits)
    enable_grpc_stream_metrics: bool = False
    tls_min_version: str | None = None  # Go name, e.g. VersionTLS13; None: TLS 1.2
    tls_cipher_suites: tuple[str, ...] = ()  # Go crypto/tls names
    metrics_cert_dir: str | None = None
    metrics_client_ca_file: str | None = None
    disable_endpoint_subset_filter: bool = False
    emit_endpoint_scores: bool = False
    allow_experimental_plugins: bool = False
    # discovery
    pool_name: str | None = None
    pool_namespace: str = "default"
    pool_group: str = "inference.networking.k8s.io"
    endpoint_selector: str | None = None
    endpoint_target_ports: tuple[int, ...] = ()
    endpoints: tuple[str, ...] = ()
    endpoints_file: str | None = None
    endpoints_resolve_interval: float = 5.0  # 0: resolve names only at start / when the file changes
    endpoints_hosts_file: str | None = None
    ready_requires_endpoint: bool = True  # parse_options: True in standalone modes, False in Kubernetes
    # configuration
    config_file: str | None = None
    config_text: str | None = None
    objectives_file: str | None = None
    model_rewrites_file: str | None = None
    # scraping
    refresh_metrics_interval: float = 0.05
    refresh_prometheus_metrics_interval: float = 5.0
    metrics_staleness_threshold: float = 2.0
    model_server_metrics_scheme: str = "http"
    model_server_metrics_path: str = "/metrics"
    model_server_metrics_port: int = 0
    model_server_metrics_https_insecure_skip_verify: bool = True
    metric_overrides: tuple[tuple[str, str], ...] = ()  # (key, Prometheus metric spec) from GIE flags
    # diagnostics
    verbosity: int = 2
    log_format: str = "json"
    zap_devel: bool = False
    zap_stacktrace_level: str | None = None  # None: error (warn with --zap-devel)
    zap_time_encoding: str | None = None  # None: ours (ISO 8601 UTC, microseconds)
    tracing: bool = True
    enable_pprof: bool = True
    metrics_endpoint_auth: bool = True
    metrics_bearer_token_file: str | None = None
    metrics_naming: str = "both"  # ours: both | llm-d | inference (see epp.server.metric_catalog)
    ha_enable_leader_election: bool = False
    replica_sync_port: int = 0  # ours: 0 = replica sync off (epp.sync)
    replica_peers: tuple[str, ...] = ()
    replica_sync_key_file: str | None = None
    replica_sync_interval: float = 0.05

    @property
    def discovery_mode(self) -> str:
        """``static``, ``file``, ``pool``, ``selector``, or ``config`` (no flag: the configuration's
        ``dataLayer.discovery`` must name the discovery plugin)."""
        if self.endpoints:
            return "static"
        if self.endpoints_file:
            return "file"
        if self.pool_name:
            return "pool"
        return "selector" if self.endpoint_selector else "config"


def parse_endpoint_list(text: str) -> tuple[str, ...]:
    """``host:port,host:port`` (IPv6 as ``[::1]:8000``) -> addresses; raises UsageError."""
    try:
        return parse_addresses(text)
    except ValueError as exc:
        raise UsageError(f"--endpoints: {exc}") from None


def parse_options(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Options:
    """Parse and validate; ``env`` defaults to ``os.environ`` (for ``NAMESPACE``)."""
    env = os.environ if env is None else env
    parser = build_parser()
    names, bools = long_flags(parser)
    ns = parser.parse_args(normalise_argv(argv, long_flags=names, bool_flags=bools))
    engine = ns.grpc_engine or env.get("EPP_GRPC_ENGINE") or "h2"
    if engine not in ENGINES:
        raise UsageError(f"EPP_GRPC_ENGINE: expected one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "ngh2" and importlib.util.find_spec("ngh2") is None:
        raise UsageError(
            "--grpc-engine=ngh2: the ngh2 package is not installed (pip install 'pyepp[ngh2]'; it ships "
            "wheels for a few platforms only, see docs/dependencies.md); the default engine h2 needs nothing "
            "extra"
        )
    ns.grpc_engine = engine
    _check(ns)
    try:
        h2_limits = h2_limits_from_flags(ns)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    overrides = tuple(
        (key, getattr(ns, flag)) for flag, key in METRIC_FLAGS.items() if getattr(ns, flag) is not None
    )
    return Options(
        host=ns.host,
        grpc_port=ns.grpc_port,
        grpc_health_port=ns.grpc_health_port,
        metrics_port=ns.metrics_port,
        secure_serving=ns.secure_serving,
        cert_path=ns.cert_path,
        enable_cert_reload=ns.enable_cert_reload,
        grpc_client_ca_file=ns.grpc_client_ca_file,
        health_checking=ns.health_checking,
        grpc_engine=engine,
        drain_timeout=_drain_timeout(ns),
        max_body_bytes=ns.max_body_bytes,
        grpc_max_recv_msg_size=ns.grpc_max_recv_msg_size or 0,
        grpc_max_send_msg_size=ns.grpc_max_send_msg_size or 0,
        h2_limits=h2_limits,
        enable_grpc_stream_metrics=ns.enable_grpc_stream_metrics,
        tls_min_version=ns.tls_min_version,
        tls_cipher_suites=_cipher_suites(ns),
        metrics_cert_dir=ns.metrics_cert_dir,
        metrics_client_ca_file=ns.metrics_client_ca_file,
        disable_endpoint_subset_filter=ns.disable_endpoint_subset_filter,
        emit_endpoint_scores=ns.emit_endpoint_scores,
        allow_experimental_plugins=ns.allow_experimental_plugins,
        pool_name=ns.pool_name,
        pool_namespace=ns.pool_namespace or env.get("NAMESPACE") or "default",
        pool_group=ns.pool_group,
        endpoint_selector=ns.endpoint_selector,
        endpoint_target_ports=ns.endpoint_target_ports or (),
        endpoints=parse_endpoint_list(ns.endpoints) if ns.endpoints is not None else (),
        endpoints_file=ns.endpoints_file,
        endpoints_resolve_interval=5.0
        if ns.endpoints_resolve_interval is None
        else ns.endpoints_resolve_interval,
        endpoints_hosts_file=ns.endpoints_hosts_file,
        ready_requires_endpoint=_ready_requires_endpoint(ns),
        config_file=ns.config_file,
        config_text=ns.config_text,
        objectives_file=ns.objectives_file,
        model_rewrites_file=ns.model_rewrites_file,
        refresh_metrics_interval=ns.refresh_metrics_interval,
        refresh_prometheus_metrics_interval=ns.refresh_prometheus_metrics_interval,
        metrics_staleness_threshold=ns.metrics_staleness_threshold,
        model_server_metrics_scheme=ns.model_server_metrics_scheme,
        model_server_metrics_path=ns.model_server_metrics_path,
        model_server_metrics_port=ns.model_server_metrics_port,
        model_server_metrics_https_insecure_skip_verify=ns.model_server_metrics_https_insecure_skip_verify,
        metric_overrides=overrides,
        verbosity=_verbosity(ns),
        log_format=ns.log_format or ns.zap_encoder or ("console" if ns.zap_devel else "json"),
        zap_devel=ns.zap_devel,
        zap_stacktrace_level=ns.zap_stacktrace_level,
        zap_time_encoding=ns.zap_time_encoding,
        tracing=ns.tracing,
        enable_pprof=ns.enable_pprof,
        metrics_endpoint_auth=ns.metrics_endpoint_auth,
        metrics_bearer_token_file=ns.metrics_bearer_token_file,
        metrics_naming=ns.metrics_naming,
        ha_enable_leader_election=ns.ha_enable_leader_election,
        replica_sync_port=ns.replica_sync_port,
        replica_peers=_replica_peers(ns),
        replica_sync_key_file=ns.replica_sync_key_file,
        replica_sync_interval=ns.replica_sync_interval,
    )


def _replica_peers(ns: argparse.Namespace) -> tuple[str, ...]:
    """``--replica-peers`` as a list; only with ``--replica-sync-port`` (checked in _check_replica_sync)."""
    if ns.replica_peers is None:
        return ()
    try:
        return parse_addresses(ns.replica_peers)
    except ValueError as exc:
        raise UsageError(f"--replica-peers: {exc}") from None


def _check_replica_sync(ns: argparse.Namespace) -> None:
    """Replica sync needs its peers and its key file (read at startup: a bad key is a StartupError)."""
    if not ns.replica_sync_port:
        for flag, value in (
            ("--replica-peers", ns.replica_peers),
            ("--replica-sync-key-file", ns.replica_sync_key_file),
        ):
            if value is not None:
                raise UsageError(f"{flag} applies only with --replica-sync-port (replica sync is off)")
        return
    if ns.replica_peers is None:
        raise UsageError("--replica-sync-port needs --replica-peers (the other replicas' sync addresses)")
    if ns.replica_sync_key_file is None:
        raise UsageError(
            "--replica-sync-port needs --replica-sync-key-file (the shared key authenticating peers)"
        )
    if ns.replica_peers is not None and "[" in ns.replica_peers:
        raise UsageError("--replica-peers: replica sync runs over IPv4; give IPv4 addresses or host names")
    if not 0.001 <= ns.replica_sync_interval <= 10.0:
        raise UsageError(f"--replica-sync-interval: expected 1ms to 10s, got {ns.replica_sync_interval}s")


def _verbosity(ns: argparse.Namespace) -> int:
    """``-v`` wins over ``--log-level``; default 2 (llm-d-router's DEFAULT level)."""
    if ns.verbosity is not None:
        return int(ns.verbosity)
    return 2 if ns.log_level is None else int(ns.log_level)


def _drain_timeout(ns: argparse.Namespace) -> float:
    """``--drain-timeout`` or its older spelling ``--shutdown-grace-period``; default 30s."""
    for value in (ns.drain_timeout, ns.shutdown_grace_period):
        if value is not None:
            return float(value)
    return 30.0


def _cipher_suites(ns: argparse.Namespace) -> tuple[str, ...]:
    """pflag's string slice: comma-separated, blanks dropped."""
    if not ns.tls_cipher_suites:
        return ()
    return tuple(name.strip() for name in ns.tls_cipher_suites.split(",") if name.strip())


def _ready_requires_endpoint(ns: argparse.Namespace) -> bool:
    """Explicit value, else true in the standalone modes (where an operator lists the servers and
    expects them up) and false in the Kubernetes modes (GIE's behaviour, which its chart's liveness
    probe relies on: a picker waiting for model servers still loading must not be restarted)."""
    if ns.ready_requires_endpoint is not None:
        return bool(ns.ready_requires_endpoint)
    return ns.endpoints is not None or ns.endpoints_file is not None


NO_ENDPOINTS = (
    "no endpoints: give --endpoints host:port,..., --endpoints-file PATH, --pool-name NAME, "
    "or --endpoint-selector k=v with --endpoint-target-ports (or dataLayer.discovery in the configuration)"
)


def _check(ns: argparse.Namespace) -> None:
    """Cross-flag rules; each violation names the flags involved."""
    if ns.config_file is not None and ns.config_text is not None:
        raise UsageError("--config-file and --config-text are mutually exclusive")
    modes = [
        flag
        for flag, value in (
            ("--endpoints", ns.endpoints),
            ("--endpoints-file", ns.endpoints_file),
            ("--pool-name", ns.pool_name),
            ("--endpoint-selector", ns.endpoint_selector),
        )
        if value is not None
    ]
    if len(modes) > 1:
        raise UsageError(f"{' and '.join(modes)} are mutually exclusive: choose one way to find endpoints")
    if not modes and ns.config_file is None and ns.config_text is None:
        raise UsageError(NO_ENDPOINTS)
    standalone = ns.endpoints is not None or ns.endpoints_file is not None
    for flag, value in (
        ("--endpoints-resolve-interval", ns.endpoints_resolve_interval),
        ("--endpoints-hosts-file", ns.endpoints_hosts_file),
    ):
        if value is not None and not standalone:
            raise UsageError(f"{flag} applies only to --endpoints or --endpoints-file")
    if (ns.endpoint_selector is None) != (ns.endpoint_target_ports is None):
        raise UsageError("--endpoint-selector and --endpoint-target-ports must be given together")
    if ns.endpoint_selector is not None:
        try:
            parse_label_selector(ns.endpoint_selector)
        except ValueError as exc:
            raise UsageError(f"--endpoint-selector: {exc}") from None
    if ns.verbosity is not None and not 0 <= ns.verbosity <= 5:
        raise UsageError(f"-v: expected a verbosity 0-5, got {ns.verbosity}")
    if ns.log_format and ns.zap_encoder and ns.log_format != ns.zap_encoder:
        raise UsageError("--log-format and --zap-encoder disagree")
    if ns.enable_cert_reload and not ns.cert_path:
        raise UsageError("--enable-cert-reload needs --cert-path (a generated certificate never changes)")
    if ns.cert_path and not ns.secure_serving:
        raise UsageError("--cert-path was given but --secure-serving=false turns TLS off")
    if ns.grpc_client_ca_file is not None:
        if not ns.secure_serving:
            raise UsageError("--grpc-client-ca-file was given but --secure-serving=false turns TLS off")
        if not os.path.isfile(ns.grpc_client_ca_file):
            raise UsageError(f"--grpc-client-ca-file: not a readable file: {ns.grpc_client_ca_file}")
    _check_serving(ns)
    _check_replica_sync(ns)
    if ns.max_body_bytes < 1:
        raise UsageError(f"--max-body-bytes: expected a positive size, got {ns.max_body_bytes}")
    if ns.refresh_metrics_interval <= 0:
        raise UsageError("--refresh-metrics-interval: expected a positive duration")
    if ns.metrics_staleness_threshold <= 0:
        raise UsageError("--metrics-staleness-threshold: expected a positive duration")


def _check_serving(ns: argparse.Namespace) -> None:
    """Drain, TLS and metrics-TLS flags (upstream's Complete/Validate rules, plus our engine limits)."""
    if (
        ns.drain_timeout is not None
        and ns.shutdown_grace_period is not None
        and ns.drain_timeout != ns.shutdown_grace_period
    ):
        raise UsageError("--drain-timeout and --shutdown-grace-period (its older spelling) disagree")
    if ns.tls_min_version is not None and ns.tls_min_version not in TLS_VERSIONS:
        raise UsageError(
            f"--tls-min-version: unknown TLS version {ns.tls_min_version!r}; supported values: "
            + ", ".join(TLS_VERSIONS)
        )
    try:
        openssl_ciphers(_cipher_suites(ns))
    except TlsError as exc:
        raise UsageError(f"--tls-cipher-suites: {exc}") from None
    tls_tuned = ns.tls_min_version not in (None, "VersionTLS12") or bool(_cipher_suites(ns))
    if tls_tuned and ns.grpc_engine == "grpcio":
        raise UsageError(
            "--tls-min-version / --tls-cipher-suites need --grpc-engine=h2 or ngh2 (grpc.aio's TLS stack has "
            "a fixed TLS 1.2 floor and cipher list)"
        )
    if ns.metrics_client_ca_file is not None:
        if not os.path.isfile(ns.metrics_client_ca_file):
            raise UsageError(
                f"--metrics-client-ca-file: metrics TLS cert file unreadable: {ns.metrics_client_ca_file}"
            )
        if ns.metrics_cert_dir is None:
            raise UsageError('"metrics-client-ca-file" requires "metrics-cert-dir"')
    if ns.metrics_cert_dir is not None:
        for name in ("tls.crt", "tls.key"):
            path = os.path.join(ns.metrics_cert_dir, name)
            if not os.path.isfile(path):
                raise UsageError(f"--metrics-cert-dir: metrics TLS cert file unreadable: {path}")
        if ns.metrics_client_ca_file is None and not ns.metrics_endpoint_auth:
            raise UsageError(
                '"metrics-cert-dir" enables metrics TLS without authentication; set "metrics-client-ca-file" '
                'or "metrics-endpoint-auth"'
            )
