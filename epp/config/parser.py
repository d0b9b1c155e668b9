"""The ``epp`` command line's flags: names, help, defaults and value parsers, in five groups (serving,
endpoint discovery, configuration, model-server scraping, diagnostics).

:func:`build_parser` returns the :mod:`argparse` parser; :func:`epp.config.options.parse_options` runs
it and turns the result into :class:`~epp.config.options.Options` (cross-flag rules are checked there).
A usage error raises :class:`UsageError` instead of exiting; ``--help`` prints and exits 0. Flags of
ours (not the Go endpoint picker's) are marked ``(pyepp)`` in their help text.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import NoReturn

from epp.config.flags import (
    BoolAction,
    ManualHelpFormatter,
    parse_duration,
    parse_port,
    parse_port_list,
    parse_quantity,
    suggest,
)
from epp.server.h2.limits import add_flags as add_h2_flags
from epp.server.logs import STACKTRACE_LEVELS, TIME_ENCODINGS

__all__ = ["ENGINES", "METRIC_FLAGS", "UsageError", "build_parser", "long_flags"]


class UsageError(Exception):
    """Invalid command line; ``str()`` is the message shown to the user (exit status 2)."""


# GIE's per-metric flags -> the data layer's metric keys (vLLM engine mapping overrides).
METRIC_FLAGS: Mapping[str, str] = {
    "total_queued_requests_metric": "waiting",
    "total_running_requests_metric": "running",
    "kv_cache_usage_percentage_metric": "kv_usage",
    "lora_info_metric": "lora",
    "cache_info_metric": "cache_config",
}

_OURS = "(pyepp)"
ENGINES = ("grpcio", "h2", "ngh2")


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
    s.add_argument(
        "--health-checking",
        action=b,
        help='also serve grpc.health.v1 on the ext_proc port (services "" and the ext_proc service; both '
        "engines) (default false)",
    )
    s.add_argument(
        "--ready-requires-endpoint",
        action=b,
        default=None,
        help=f"{_OURS} report ready only once an endpoint has answered a scrape (default true with "
        "--endpoints / --endpoints-file, false in the Kubernetes modes as GIE)",
    )
    s.add_argument(
        "--grpc-engine", choices=ENGINES, default=None,
        help=f"{_OURS} ext_proc server: h2 (lean HTTP/2, ~3x less CPU per request), ngh2 (the same on "
        "libnghttp2 via ngh2, with nghttp2's defences; see docs/epp-server.md) or grpcio (grpc.aio) "
        "(default env EPP_GRPC_ENGINE, else h2)",
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
    for flag in METRIC_FLAGS:
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
    r = p.add_argument_group(f"replica sync {_OURS}: active-active replicas share prefix ownership and load")
    r.add_argument(
        "--replica-sync-port", type=parse_port, default=0,
        help=f"{_OURS} UDP port on which this replica exchanges prefix-affinity-scorer ownerships and "
        "in-flight counts with --replica-peers; 0 turns replica sync off (default 0)",
    )  # fmt: skip
    r.add_argument(
        "--replica-peers", default=None, metavar="HOST:PORT,...",
        help=f"{_OURS} the other replicas' sync addresses; a host name (a headless Service) is re-resolved "
        "every 5s to all its addresses, this replica's own skipped (default none)",
    )  # fmt: skip
    r.add_argument(
        "--replica-sync-key-file", default=None,
        help=f"{_OURS} file holding the shared HMAC-SHA256 key (>= 16 bytes) that authenticates every sync "
        "datagram; required with --replica-sync-port (default none)",
    )  # fmt: skip
    r.add_argument(
        "--replica-sync-interval", type=parse_duration, default=0.05,
        help=f"{_OURS} how often in-flight counts are sent; a peer's counts expire after 4 intervals "
        "(default 50ms)",
    )  # fmt: skip
    return p


def long_flags(parser: argparse.ArgumentParser) -> tuple[frozenset[str], frozenset[str]]:
    names: set[str] = set()
    bools: set[str] = set()
    for action in parser._actions:
        for opt in action.option_strings:
            if opt.startswith("--"):
                names.add(opt[2:])
                if isinstance(action, BoolAction):
                    bools.add(opt[2:])
    return frozenset(names), frozenset(bools)


_ZAP_LEVELS = {"panic": 0, "fatal": 0, "error": 0, "warn": 0, "warning": 0, "info": 1, "debug": 4}


def _zap_level(text: str) -> int:
    """controller-runtime's zap level: a name, or a number (higher = more verbose), as a -v value."""
    if text.lower() in _ZAP_LEVELS:
        return _ZAP_LEVELS[text.lower()]
    if text.isdigit():
        return min(int(text), 5)
    raise argparse.ArgumentTypeError(f"expected error, warn, info, debug or a number, got {text!r}")
