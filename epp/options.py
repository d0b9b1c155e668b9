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
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from datalayer.discovery import parse_endpoint_list as parse_addresses
from epp.flags import (
    BoolAction,
    ManualHelpFormatter,
    normalise_argv,
    parse_duration,
    parse_port,
    parse_port_list,
    parse_quantity,
    suggest,
)
from epp.label_selector import parse_label_selector
from epp.server.h2.limits import H2Limits
from epp.server.h2.limits import add_flags as add_h2_flags
from epp.server.h2.limits import from_flags as h2_limits_from_flags
from epp.server.logs import STACKTRACE_LEVELS, TIME_ENCODINGS
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


class UsageError(Exception):
    """Invalid command line; ``str()`` is the message shown to the user (exit status 2)."""


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


# GIE's per-metric flags -> the data layer's metric keys (vLLM engine mapping overrides).
_METRIC_FLAGS: Mapping[str, str] = {
    "total_queued_requests_metric": "waiting",
    "total_running_requests_metric": "running",
    "kv_cache_usage_percentage_metric": "kv_usage",
    "lora_info_metric": "lora",
    "cache_info_metric": "cache_config",
}

_OURS = "(pyepp)"
ENGINES = ("grpcio", "h2")


class _Parser(argparse.ArgumentParser):
    """Reports errors as :class:`UsageError` instead of exiting (``--help`` still prints and exits 0)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            unknown = message.split(": ", 1)[1].split()
            flags = [o[2:] for a in self._actions for o in a.option_strings if o.startswith("--")]
            hints = [
                suggest(u.split("=", 1)[0].lstrip("-"), flags, "--") for u in unknown if u.startswith("-")
            ]
            message += "".join(h for h in hints if h)
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="epp",
        description="Endpoint picker for LLM inference: an Envoy ext_proc gRPC service (GIE-compatible). "
        "Subcommand: 'epp check-config FILE' validates an EndpointPickerConfig and exits.",
        allow_abbrev=False,
        formatter_class=ManualHelpFormatter,
    )
    b = BoolAction
    s = p.add_argument_group("serving")
    s.add_argument("--host", default="0.0.0.0", help=f"{_OURS} bind address of every port")
    s.add_argument("--grpc-port", type=parse_port, default=9002, help="ext_proc gRPC port")
    s.add_argument("--grpc-health-port", type=parse_port, default=9003, help="grpc.health.v1 port")
    s.add_argument("--metrics-port", type=parse_port, default=9090, help="/metrics and /debug port")
    s.add_argument("--secure-serving", action=b, default=True, help="serve ext_proc over TLS")
    s.add_argument("--cert-path", help="directory holding tls.crt and tls.key (default self-signed)")
    s.add_argument("--enable-cert-reload", action=b, help="reload --cert-path files when they change")
    s.add_argument(
        "--grpc-client-ca-file",
        help=f"{_OURS} PEM CA bundle: the ext_proc port requires a client certificate it signed "
        "(mutual TLS; needs --secure-serving) (default none: no client certificate asked)",
    )
    s.add_argument("--health-checking", action=b, help="also serve grpc.health.v1 on the ext_proc port")
    s.add_argument(
        "--ready-requires-endpoint",
        action=b,
        default=None,
        help=f"{_OURS} report ready only once an endpoint has answered a scrape (default true with "
        "--endpoints / --endpoints-file, false in the Kubernetes modes as GIE)",
    )
    s.add_argument(
        "--grpc-engine", choices=ENGINES, default=None,
        help=f"{_OURS} ext_proc server: h2 (lean HTTP/2, ~3x less CPU per request) or grpcio (grpc.aio) "
        "(default env EPP_GRPC_ENGINE, else h2; grpcio with --health-checking)",
    )  # fmt: skip
    s.add_argument(
        "--drain-timeout",
        type=parse_duration,
        default=None,
        help="after SIGTERM: health NOT_SERVING, leader lease released, no new ext_proc streams; "
        "in-flight streams may finish for this long, then the rest are cancelled (default 30s)",
    )
    s.add_argument(
        "--shutdown-grace-period", type=parse_duration, default=None,
        help=f"{_OURS} older spelling of --drain-timeout (default none)",
    )  # fmt: skip
    s.add_argument(
        "--grpc-max-recv-msg-size", type=parse_quantity, default=None,
        help="largest ext_proc gRPC message accepted, e.g. 10MiB, 25MB (default --max-body-bytes + 1MiB)",
    )  # fmt: skip
    s.add_argument(
        "--grpc-max-send-msg-size", type=parse_quantity, default=None,
        help="largest ext_proc gRPC message sent, e.g. 10MiB (default no limit)",
    )  # fmt: skip
    add_h2_flags(s)
    s.add_argument(
        "--enable-grpc-stream-metrics", action=b,
        help="export llm_d_epp_extproc_streams_inflight, _stream_duration_seconds, _streams_total{code}",
    )  # fmt: skip
    s.add_argument(
        "--tls-min-version",
        help="lowest TLS version: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13 "
        "(default VersionTLS12)",
    )
    s.add_argument(
        "--tls-cipher-suites",
        help="comma-separated Go crypto/tls cipher suite names, TLS 1.2 and below only "
        "(default OpenSSL's list)",
    )
    s.add_argument(
        "--max-body-bytes",
        type=parse_quantity,
        default=16 * 1024 * 1024,
        help=f"{_OURS} request bodies above this size get 413: bytes, or a size such as 16MiB, 20MB",
    )
    d = p.add_argument_group("endpoint discovery (exactly one mode)")
    d.add_argument("--pool-name", help="InferencePool to serve, Kubernetes mode A (default none)")
    d.add_argument(
        "--pool-namespace", default=None, help="namespace of the pool (default env NAMESPACE, else default)"
    )
    d.add_argument("--pool-group", default="inference.networking.k8s.io", help="API group of the pool")
    d.add_argument(
        "--endpoint-selector", help="pod label selector k=v,k2=v2, Kubernetes mode B (default none)"
    )
    d.add_argument(
        "--endpoint-target-ports",
        type=parse_port_list,
        help="model-server ports with --endpoint-selector, e.g. 8000,8001 (default none)",
    )
    d.add_argument(
        "--endpoints",
        help=f"{_OURS} static list host:port,host:port; a host name means every IPv4/IPv6 address it "
        "resolves to (default none)",
    )
    d.add_argument(
        "--endpoints-file", help=f"{_OURS} YAML/JSON file of endpoints, watched for changes (default none)"
    )
    d.add_argument(
        "--endpoints-resolve-interval",
        type=parse_duration,
        default=None,
        help=f"{_OURS} how often host names in --endpoints / --endpoints-file are resolved again "
        "(0: only at start and when the file changes) (default 5s)",
    )
    d.add_argument(
        "--endpoints-hosts-file",
        help=f"{_OURS} /etc/hosts-format file consulted before DNS for those names, re-read when it "
        "changes, a testing and operations aid (default none)",
    )
    c = p.add_argument_group("configuration")
    c.add_argument(
        "--config-file", help="EndpointPickerConfig YAML file (default the built-in configuration)"
    )
    c.add_argument(
        "--config-text", help="EndpointPickerConfig YAML text instead of --config-file (default none)"
    )
    c.add_argument(
        "--objectives-file", help=f"{_OURS} InferenceObjective names -> priorities, YAML (default none)"
    )
    c.add_argument(
        "--model-rewrites-file",
        help=f"{_OURS} InferenceModelRewrite objects: model aliasing and weighted splits (YAML)",
    )
    c.add_argument(
        "--allow-experimental-plugins", action=b,
        help="allow plugin types llm-d-router marks Alpha in llm-d.ai configurations",
    )  # fmt: skip
    c.add_argument(
        "--disable-endpoint-subset-filter", action=b,
        help="ignore the proxy's endpoint subset hint (envoy.lb.subset_hint): schedule over every endpoint",
    )  # fmt: skip
    c.add_argument(
        "--emit-endpoint-scores", action=b,
        help="add the per-endpoint scores under envoy.lb x-gateway-destination-endpoint-scores",
    )  # fmt: skip
    m = p.add_argument_group("model-server scraping")
    m.add_argument(
        "--refresh-metrics-interval",
        type=parse_duration,
        default=0.05,
        help="how often each model server's /metrics is scraped",
    )
    m.add_argument(
        "--refresh-prometheus-metrics-interval",
        type=parse_duration,
        default=5.0,
        help="how often the pool-wide Prometheus metrics are refreshed",
    )
    m.add_argument(
        "--metrics-staleness-threshold",
        type=parse_duration,
        default=2.0,
        help="a model server's metrics older than this are stale",
    )
    m.add_argument(
        "--model-server-metrics-scheme", choices=("http", "https"), default="http",
        help="scheme of the model servers' metrics endpoint",
    )  # fmt: skip
    m.add_argument(
        "--model-server-metrics-path", default="/metrics", help="path of the model servers' metrics"
    )
    m.add_argument(
        "--model-server-metrics-port", type=parse_port, default=0,
        help="scrape metrics on this port instead of the serving port (0: the serving port); "
        "deprecated in GIE",
    )  # fmt: skip
    m.add_argument(
        "--model-server-metrics-https-insecure-skip-verify", action=b, default=True,
        help="with https, do not verify the model servers' certificates",
    )  # fmt: skip
    for flag in _METRIC_FLAGS:
        m.add_argument(
            "--" + flag.replace("_", "-"),
            help="Prometheus metric spec, a vLLM mapping override (default the engine's)",
        )
    g = p.add_argument_group("diagnostics")
    g.add_argument("-v", dest="verbosity", type=int, default=None, help="log verbosity 0-5 (default 2)")
    g.add_argument(
        "--log-format", choices=("json", "console"), default=None, help="log line format (default json)"
    )
    g.add_argument(
        "--zap-encoder", choices=("json", "console"), help="older GIE spelling of --log-format (default none)"
    )
    g.add_argument(
        "--log-level", "--zap-log-level", dest="log_level", type=_zap_level,
        help="older GIE spelling of -v: error, warn, info, debug, or a number (default none)",
    )  # fmt: skip
    g.add_argument(
        "--zap-devel", action=b,
        help="development logging: console format unless --log-format, stack traces from warnings",
    )  # fmt: skip
    g.add_argument(
        "--zap-stacktrace-level", type=str.lower, choices=STACKTRACE_LEVELS,
        help="level from which log lines carry a stack trace (default error; warn with --zap-devel)",
    )  # fmt: skip
    g.add_argument(
        "--zap-time-encoding", choices=TIME_ENCODINGS,
        help="timestamp format: epoch, millis, nano, iso8601, rfc3339, rfc3339nano (default ISO 8601 UTC)",
    )  # fmt: skip
    g.add_argument(
        "--metrics-cert-dir",
        help="serve the metrics port over TLS: tls.crt/tls.key in this dir (default none)",
    )
    g.add_argument(
        "--metrics-client-ca-file",
        help="PEM CA: the metrics port requires a client certificate it signed (default none)",
    )
    g.add_argument("--tracing", action=b, default=True, help="log W3C trace ids of requests")
    g.add_argument("--enable-pprof", action=b, default=True, help="accepted for GIE compatibility")
    g.add_argument(
        "--metrics-endpoint-auth",
        action=b,
        default=True,
        help="require the bearer token on /metrics and /debug",
    )
    g.add_argument(
        "--metrics-bearer-token-file", help=f"{_OURS} file with the token /metrics requires (default none)"
    )
    g.add_argument(
        "--metrics-naming", choices=("both", "llm-d", "inference"), default="both",
        help=f"{_OURS} metric names to export: llm_d_epp_* and the deprecated inference_* twins (both, "
        "as llm-d-router), llm_d_epp_* only, or inference_* only (GIE's names)",
    )  # fmt: skip
    g.add_argument("--ha-enable-leader-election", action=b, help="active-passive HA via a Kubernetes Lease")
    return p


def _long_flags(parser: argparse.ArgumentParser) -> tuple[frozenset[str], frozenset[str]]:
    names: set[str] = set()
    bools: set[str] = set()
    for action in parser._actions:
        for opt in action.option_strings:
            if opt.startswith("--"):
                names.add(opt[2:])
                if isinstance(action, BoolAction):
                    bools.add(opt[2:])
    return frozenset(names), frozenset(bools)


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
    names, bools = _long_flags(parser)
    ns = parser.parse_args(normalise_argv(argv, long_flags=names, bool_flags=bools))
    engine = ns.grpc_engine or env.get("EPP_GRPC_ENGINE") or ("grpcio" if ns.health_checking else "h2")
    if engine not in ENGINES:
        raise UsageError(f"EPP_GRPC_ENGINE: expected one of {', '.join(ENGINES)}, got {engine!r}")
    ns.grpc_engine = engine
    _check(ns)
    try:
        h2_limits = h2_limits_from_flags(ns)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    overrides = tuple(
        (key, getattr(ns, flag)) for flag, key in _METRIC_FLAGS.items() if getattr(ns, flag) is not None
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
    )


_ZAP_LEVELS = {"panic": 0, "fatal": 0, "error": 0, "warn": 0, "warning": 0, "info": 1, "debug": 4}


def _zap_level(text: str) -> int:
    """controller-runtime's zap level: a name, or a number (higher = more verbose), as a -v value."""
    if text.lower() in _ZAP_LEVELS:
        return _ZAP_LEVELS[text.lower()]
    if text.isdigit():
        return min(int(text), 5)
    raise argparse.ArgumentTypeError(f"expected error, warn, info, debug or a number, got {text!r}")


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
    if ns.grpc_engine == "h2" and ns.health_checking:
        raise UsageError("--health-checking needs --grpc-engine=grpcio (the h2 engine serves only ext_proc)")
    _check_serving(ns)
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
    if tls_tuned and ns.grpc_engine != "h2":
        raise UsageError(
            "--tls-min-version / --tls-cipher-suites need --grpc-engine=h2 (grpc.aio's TLS stack has a fixed "
            "TLS 1.2 floor and cipher list)"
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
