"""Parsing and validation of the flags llm-d-router added (cases from its options_test.go where it has
them), and the logging flags' effect on the rendered lines."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from certs import make_pki

from epp.config.flags import parse_quantity
from epp.config.options import UsageError, parse_options
from epp.config.stability import experimental_plugin_error
from epp.server.logs import configure_logging
from epp.server.tls import GO_CIPHER_SUITES, openssl_ciphers

BASE = ["--pool-name", "pool"]


def parse(*args: str) -> object:
    return parse_options([*BASE, *args], env={})


def test_new_defaults_match_llm_d_router() -> None:
    o = parse_options(BASE, env={})
    assert o.drain_timeout == 30.0
    assert (o.grpc_max_recv_msg_size, o.grpc_max_send_msg_size) == (0, 0)
    assert o.verbosity == 2
    assert not any(
        (
            o.allow_experimental_plugins,
            o.disable_endpoint_subset_filter,
            o.emit_endpoint_scores,
            o.enable_grpc_stream_metrics,
        )
    )
    assert o.tls_min_version is None and o.tls_cipher_suites == ()
    assert o.metrics_cert_dir is None and o.metrics_client_ca_file is None


@pytest.mark.parametrize(
    ("recv", "send", "want"),
    [  # llm-d-router TestGRPCMaxMsgSizeFlags
        ("10485760", "20971520", (10485760, 20971520)),
        ("10Mi", "20M", (10485760, 20000000)),
        ("10MiB", "20MB", (10485760, 20000000)),
    ],
)
def test_grpc_message_sizes(recv: str, send: str, want: tuple[int, int]) -> None:
    o = parse("--grpc-max-recv-msg-size", recv, "--grpc-max-send-msg-size", send)
    assert (o.grpc_max_recv_msg_size, o.grpc_max_send_msg_size) == want  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "arg",
    [
        "--grpc-max-recv-msg-size=10invalid",
        "--grpc-max-send-msg-size=abc",
        "--grpc-max-recv-msg-size=-10Mi",
        "--grpc-max-recv-msg-size=10Ei",
        "--grpc-max-recv-msg-size=1.5",
    ],
)
def test_grpc_message_size_errors(arg: str) -> None:
    with pytest.raises(UsageError, match="grpc-max"):
        parse(arg)


@pytest.mark.parametrize(
    ("text", "want"),
    [("0", 0), ("1k", 1000), ("1Ki", 1024), ("1.5Gi", 1610612736), ("1e6", 1000000), ("4MB", 4000000)],
)
def test_quantity_syntax(text: str, want: int) -> None:
    assert parse_quantity(text) == want


@pytest.mark.parametrize("flags", [["--drain-timeout", "5s"], ["--shutdown-grace-period=5s"]])
def test_drain_timeout_and_its_older_spelling(flags: list[str]) -> None:
    assert parse(*flags).drain_timeout == 5.0  # type: ignore[attr-defined]


def test_drain_timeout_spellings_must_agree() -> None:
    with pytest.raises(UsageError, match="disagree"):
        parse("--drain-timeout=5s", "--shutdown-grace-period=6s")
    with pytest.raises(UsageError, match="duration"):
        parse("--drain-timeout=soon")


@pytest.mark.parametrize("version", ["VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13"])
def test_tls_min_version_names(version: str) -> None:
    assert parse("--tls-min-version", version).tls_min_version == version  # type: ignore[attr-defined]


def test_tls_flags_errors() -> None:
    with pytest.raises(UsageError, match=r"unknown TLS version 'TLS1\.2'"):
        parse("--tls-min-version", "TLS1.2")
    with pytest.raises(UsageError, match="unknown cipher suite 'FAKE_CIPHER_SUITE'"):
        parse("--tls-cipher-suites", "FAKE_CIPHER_SUITE")
    with pytest.raises(UsageError, match="grpc-engine=h2"):
        parse("--tls-min-version", "VersionTLS13", "--grpc-engine", "grpcio")
    # grpc.aio's own floor is TLS 1.2, so naming it is fine with either engine
    assert parse("--tls-min-version", "VersionTLS12", "--grpc-engine", "grpcio")


def test_cipher_suites_list() -> None:
    o = parse(
        "--tls-cipher-suites",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,",
    )
    assert o.tls_cipher_suites == (  # type: ignore[attr-defined]
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    )
    assert openssl_ciphers(o.tls_cipher_suites) == "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384"  # type: ignore[attr-defined]
    assert openssl_ciphers(["TLS_AES_128_GCM_SHA256"]) is None  # TLS 1.3: not configurable, as in Go
    assert len(GO_CIPHER_SUITES) == 25


def test_metrics_tls_flag_rules(tmp_path: Path) -> None:
    """llm-d-router TestValidateMetricsMTLS."""
    pki = make_pki(tmp_path)
    cert_dir, ca = str(pki["server_dir"]), str(pki["ca"])
    assert parse("--metrics-cert-dir", cert_dir, "--metrics-client-ca-file", ca)
    assert parse("--metrics-cert-dir", cert_dir)  # with --metrics-endpoint-auth (default true)
    assert parse(
        "--metrics-cert-dir", cert_dir, "--metrics-client-ca-file", ca, "--metrics-endpoint-auth=false"
    )
    with pytest.raises(UsageError, match="without authentication"):
        parse("--metrics-cert-dir", cert_dir, "--metrics-endpoint-auth=false")
    with pytest.raises(UsageError, match='requires "metrics-cert-dir"'):
        parse("--metrics-client-ca-file", ca)
    with pytest.raises(UsageError, match="unreadable"):
        parse("--metrics-cert-dir", str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="unreadable"):
        parse("--metrics-cert-dir", cert_dir, "--metrics-client-ca-file", str(tmp_path / "nope.crt"))


@pytest.mark.parametrize(
    "flag",
    [
        "--allow-experimental-plugins",
        "--disable-endpoint-subset-filter",
        "--emit-endpoint-scores",
        "--enable-grpc-stream-metrics",
        "--zap-devel",
    ],
)
def test_boolean_flags_take_go_syntax(flag: str) -> None:
    attr = flag[2:].replace("-", "_")
    assert getattr(parse(flag), attr) is True
    assert getattr(parse(f"{flag}=false"), attr) is False
    assert getattr(parse(flag, "true"), attr) is True


def test_zap_flags() -> None:
    o = parse("--zap-stacktrace-level", "INFO", "--zap-time-encoding", "rfc3339")
    assert (o.zap_stacktrace_level, o.zap_time_encoding) == ("info", "rfc3339")  # type: ignore[attr-defined]
    assert parse("--zap-devel").log_format == "console"  # type: ignore[attr-defined]
    assert parse("--zap-devel", "--log-format", "json").log_format == "json"  # type: ignore[attr-defined]
    with pytest.raises(UsageError):
        parse("--zap-time-encoding", "unix")
    with pytest.raises(UsageError):
        parse("--zap-stacktrace-level", "warn")


def _log_line(**kwargs: object) -> dict[str, object]:
    import structlog

    out = io.StringIO()
    configure_logging(2, "json", out, **kwargs)  # type: ignore[arg-type]
    structlog.get_logger("t").info("hello")
    structlog.get_logger("t").error("bad")
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["hello", "bad"]
    return {"info": lines[0], "error": lines[1]}


@pytest.mark.parametrize(
    ("encoding", "pattern"),
    [
        ("iso8601", r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"),
        ("rfc3339", r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"),
        ("rfc3339nano", r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$"),
    ],
)
def test_time_encoding_text(encoding: str, pattern: str) -> None:
    import re

    stamp = _log_line(time_encoding=encoding)["info"]["timestamp"]  # type: ignore[index]
    assert isinstance(stamp, str) and re.match(pattern, stamp), stamp


def test_time_encoding_numbers() -> None:
    import time

    now = time.time()
    epoch = _log_line(time_encoding="epoch")["info"]["timestamp"]  # type: ignore[index]
    millis = _log_line(time_encoding="millis")["info"]["timestamp"]  # type: ignore[index]
    nano = _log_line(time_encoding="nano")["info"]["timestamp"]  # type: ignore[index]
    assert abs(epoch - now) < 5 and abs(millis / 1e3 - now) < 5  # type: ignore[operator]
    assert isinstance(nano, int) and abs(nano / 1e9 - now) < 5


def test_stacktrace_level() -> None:
    default = _log_line()
    assert "stacktrace" not in default["info"] and "test_stacktrace_level" in default["error"]["stacktrace"]  # type: ignore[operator]
    info = _log_line(stacktrace_level="info")
    assert "stacktrace" in info["info"]
    panic = _log_line(stacktrace_level="panic")
    assert "stacktrace" not in panic["error"]
    devel = _log_line(development=True)  # development: from warnings on
    assert "stacktrace" in devel["error"] and "stacktrace" not in devel["info"]


def test_experimental_plugin_gate() -> None:
    plugins = [("b", "queue-scorer"), ("a", "session-affinity-scorer")]
    error = experimental_plugin_error("llm-d.ai/v1alpha1", plugins, allowed=False)
    assert error == (
        "plugin 'a' (type: 'session-affinity-scorer') has Alpha stability level, but command line flag "
        "--allow-experimental-plugins is not set"
    )
    assert experimental_plugin_error("llm-d.ai/v1alpha1", plugins, allowed=True) is None
    # GIE / llm-d-inference-scheduler files (older apiVersion): those binaries have no stability gate
    assert experimental_plugin_error("inference.networking.x-k8s.io/v1alpha1", plugins, allowed=False) is None
    assert experimental_plugin_error("llm-d.ai/v1alpha1", [("q", "queue-scorer")], allowed=False) is None


@pytest.mark.parametrize(
    ("selector", "canonical"),
    [  # the forms llm-d-router's --endpoint-selector help names
        ("app=vllm,env=prod", "app=vllm,env=prod"),
        ("env in (prod, staging),tier!=frontend", "env in (prod,staging),tier!=frontend"),
        ("key,!deprecated", "key,!deprecated"),
        ("example.com/role == decode", "example.com/role==decode"),
        ("replicas>2", "replicas>2"),
    ],
)
def test_endpoint_selector_takes_kubernetes_selector_syntax(selector: str, canonical: str) -> None:
    from epp.kubernetes.label_selector import parse_label_selector

    o = parse_options(["--endpoint-selector", selector, "--endpoint-target-ports", "8000"], env={})
    assert o.endpoint_selector == selector and parse_label_selector(selector) == canonical


@pytest.mark.parametrize("selector", ["", "a=b,", "=b", "a in b", "a in ()", "a>x", "a b", "-a=b", "a=(b)"])
def test_bad_endpoint_selectors(selector: str) -> None:
    with pytest.raises(UsageError, match="--endpoint-selector"):
        parse_options(["--endpoint-selector", selector, "--endpoint-target-ports", "8000"], env={})


def test_endpoint_target_ports_drop_duplicates_in_order() -> None:
    """llm-d-router TestEndpointTargetPorts ("Handle duplicates order preservation")."""
    o = parse_options(
        ["--endpoint-selector", "a=b", "--endpoint-target-ports", "3002,3000,3002,3001"], env={}
    )
    assert o.endpoint_target_ports == (3002, 3000, 3001)
