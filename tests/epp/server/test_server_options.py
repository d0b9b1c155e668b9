"""Flag parsing: GIE-style invocations, Go value syntax, contradictions and unknown flags."""

from __future__ import annotations

import importlib.util

import pytest

from epp.cli import main
from epp.config.flags import parse_duration
from epp.config.options import Options, UsageError, parse_options


def test_defaults_match_gie() -> None:
    o = parse_options(["--endpoints", "10.0.0.1:8000"], env={})
    assert (o.grpc_port, o.grpc_health_port, o.metrics_port) == (9002, 9003, 9090)
    assert o.secure_serving is True
    assert o.pool_namespace == "default"
    assert o.pool_group == "inference.networking.k8s.io"
    assert o.refresh_metrics_interval == pytest.approx(0.05)
    assert o.metrics_staleness_threshold == pytest.approx(2.0)
    assert o.endpoints == ("10.0.0.1:8000",)
    assert o.discovery_mode == "static"


def test_gie_helm_invocation_parses_unchanged() -> None:
    argv = [
        "--pool-name", "vllm-llama3", "--pool-namespace", "team-a",
        "--config-file", "/config/default-plugins.yaml", "-v", "3", "--grpc-port", "9002",
        "--grpc-health-port", "9003", "--metrics-port", "9090", "--secure-serving=false",
        "--model-server-metrics-path", "/metrics", "--refresh-metrics-interval", "100ms",
        "--metrics-endpoint-auth", "false", "--enable-pprof=true", "--tracing=false",
        "--kv-cache-usage-percentage-metric", "vllm:gpu_cache_usage_perc",
    ]  # fmt: skip
    o = parse_options(argv, env={})
    assert o.pool_name == "vllm-llama3" and o.pool_namespace == "team-a"
    assert o.config_file == "/config/default-plugins.yaml"
    assert o.verbosity == 3
    assert o.secure_serving is False and o.metrics_endpoint_auth is False and o.tracing is False
    assert o.refresh_metrics_interval == pytest.approx(0.1)
    assert o.metric_overrides == (("kv_usage", "vllm:gpu_cache_usage_perc"),)
    assert o.discovery_mode == "pool"


@pytest.mark.parametrize("spelling", [["-v", "4"], ["-v=4"], ["--v=4"], ["--v", "4"], ["-v4"]])
def test_verbosity_spellings(spelling: list[str]) -> None:
    assert parse_options(["--endpoints", "a:1", *spelling], env={}).verbosity == 4


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--secure-serving"], True),
        (["--secure-serving=false"], False),
        (["--secure-serving", "False"], False),
        (["--secure-serving=0"], False),
        (["-secure-serving=f"], False),
        (["--secure-serving", "true"], True),
    ],
)
def test_bool_spellings(args: list[str], expected: bool) -> None:
    assert parse_options(["--endpoints", "a:1", *args], env={}).secure_serving is expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("50ms", 0.05), ("2s", 2.0), ("1m30s", 90.0), ("1.5s", 1.5), ("100us", 1e-4), ("0", 0.0), ("1h", 3600)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_namespace_from_env() -> None:
    o = parse_options(["--pool-name", "p"], env={"NAMESPACE": "ns1"})
    assert o.pool_namespace == "ns1"
    explicit = parse_options(["--pool-name", "p", "--pool-namespace", "x"], env={"NAMESPACE": "ns1"})
    assert explicit.pool_namespace == "x"


def test_selector_mode() -> None:
    o = parse_options(["--endpoint-selector", "app=vllm,env=prod", "--endpoint-target-ports", "8000,8001"])
    assert o.discovery_mode == "selector" and o.endpoint_target_ports == (8000, 8001)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--endpoints", "a:1", "--pool-name", "p"], "mutually exclusive"),
        (["--endpoints", "a:1", "--endpoints-file", "f.yaml"], "mutually exclusive"),
        (["--endpoints", "a:1", "--config-file", "x", "--config-text", "y"], "--config-text"),
        ([], "no endpoints"),
        (["--endpoint-selector", "app=x"], "--endpoint-target-ports"),
        (["--endpoint-selector", "app in x", "--endpoint-target-ports", "8000"], "invalid label selector"),
        (["--endpoints", "a:1", "--enable-cert-reload"], "--cert-path"),
        (["--endpoints", "a:1", "--cert-path", "/c", "--secure-serving=false"], "TLS off"),
        (["--endpoints", "a:1", "-v", "9"], "verbosity"),
        (["--endpoints", "a"], "host:port"),
        (["--endpoints", "a:1,a:1"], "duplicate"),
        (["--endpoints", "a:1", "--refresh-metrics-interval", "50"], "duration"),
        (["--endpoints", "a:1", "--secure-serving=maybe"], "boolean"),
        (["--endpoints", "a:1", "--grpc-port", "70000"], "port"),
        (["--endpoints", "a:1", "--no-such-flag"], "unrecognized"),
        (["--endpoints", "a:1", "stray"], "unrecognized"),
        (["--endpoints", "a b:1"], "host name"),
        (["--endpoints", "a:1", "--endpoints-resolve-interval", "5"], "duration"),
        (["--pool-name", "p", "--endpoints-resolve-interval", "1s"], "applies only to --endpoints"),
        (["--pool-name", "p", "--endpoints-hosts-file", "hosts"], "applies only to --endpoints"),
        (["--endpoints", "a:1", "--ready-requires-endpoint=maybe"], "boolean"),
    ],
)
def test_bad_command_lines(args: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_options(args, env={})


def test_cli_exit_status_2_with_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--endpoints", "a:1", "--pool-name", "p"]) == 2
    err = capsys.readouterr().err
    assert "--endpoints and --pool-name are mutually exclusive" in err
    assert main(["--bogus"]) == 2
    assert "--bogus" in capsys.readouterr().err


def test_cli_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--grpc-port", "--pool-name", "--config-file", "--secure-serving", "--endpoints-file"):
        assert flag in out


def test_options_is_frozen() -> None:
    o = Options()
    with pytest.raises(AttributeError):
        o.grpc_port = 1  # type: ignore[misc]


def test_older_gie_chart_invocation() -> None:
    """GIE's chart at some versions: zap flags, and flags rendered as separate name/value pairs."""
    argv = [
        "--pool-name", "pool", "--zap-encoder", "json", "--log-level", "error",
        "--config-file", "/config/default-plugins.yaml", "--secure-serving", "false",
        "--total-queued-requests-metric", "nv_trt_llm_request_metrics{request_type=waiting}",
        "--lora-info-metric", "",
    ]  # fmt: skip
    o = parse_options(argv, env={})
    assert o.log_format == "json" and o.verbosity == 0 and o.secure_serving is False
    assert o.metric_overrides == (
        ("waiting", "nv_trt_llm_request_metrics{request_type=waiting}"),
        ("lora", ""),  # an empty spec disables the metric
    )
    assert parse_options(["--pool-name", "p", "--zap-log-level", "debug"], env={}).verbosity == 4
    assert parse_options(["--pool-name", "p", "--log-level", "info", "-v", "3"], env={}).verbosity == 3
    with pytest.raises(UsageError, match="disagree"):
        parse_options(["--pool-name", "p", "--zap-encoder", "json", "--log-format", "console"], env={})


def test_grpc_engine_flag_and_environment() -> None:
    assert parse_options(["--endpoints", "a:1"], env={}).grpc_engine == "h2"
    assert parse_options(["--endpoints", "a:1", "--health-checking"], env={}).grpc_engine == "h2"
    assert parse_options(["--endpoints", "a:1"], env={"EPP_GRPC_ENGINE": "grpcio"}).grpc_engine == "grpcio"
    assert parse_options(["--endpoints", "a:1"], env={"EPP_GRPC_ENGINE": "h2"}).grpc_engine == "h2"
    flag = parse_options(["--endpoints", "a:1", "--grpc-engine", "grpcio"], env={"EPP_GRPC_ENGINE": "h2"})
    assert flag.grpc_engine == "grpcio"
    with pytest.raises(UsageError, match="EPP_GRPC_ENGINE"):
        parse_options(["--endpoints", "a:1"], env={"EPP_GRPC_ENGINE": "fast"})
    both = parse_options(["--endpoints", "a:1", "--grpc-engine=h2", "--health-checking"], env={})
    assert (both.grpc_engine, both.health_checking) == ("h2", True)  # the h2 engine serves health too


def test_ngh2_engine_needs_its_optional_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """ngh2 is an optional dependency (wheels for a few platforms only): choosing the engine without it
    installed stops the start with a message naming the flag and the extra to install."""
    assert parse_options(["--endpoints", "a:1", "--grpc-engine=ngh2"], env={}).grpc_engine == "ngh2"
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ngh2" else real(name, *a)
    )
    with pytest.raises(
        UsageError, match=r"--grpc-engine=ngh2: the ngh2 package is not installed .*pyepp\[ngh2\]"
    ):
        parse_options(["--endpoints", "a:1", "--grpc-engine=ngh2"], env={})
    with pytest.raises(UsageError, match="ngh2 package is not installed"):
        parse_options(["--endpoints", "a:1"], env={"EPP_GRPC_ENGINE": "ngh2"})
    assert parse_options(["--endpoints", "a:1"], env={}).grpc_engine == "h2"  # the default needs nothing


def test_name_resolution_and_readiness_flags() -> None:
    o = parse_options(["--endpoints", "vllm-a:8000"], env={})
    assert (o.endpoints_resolve_interval, o.endpoints_hosts_file, o.ready_requires_endpoint) == (
        5.0,
        None,
        True,
    )
    o = parse_options(["--endpoints-file", "e.yaml", "--endpoints-resolve-interval", "250ms"], env={})
    assert o.endpoints_resolve_interval == pytest.approx(0.25) and o.ready_requires_endpoint is True
    o = parse_options(
        ["--endpoints", "a:1", "--endpoints-resolve-interval=0", "--endpoints-hosts-file=h"], env={}
    )
    assert (o.endpoints_resolve_interval, o.endpoints_hosts_file) == (0.0, "h")
    assert (
        parse_options(
            ["--endpoints", "a:1", "--ready-requires-endpoint", "false"], env={}
        ).ready_requires_endpoint
        is False
    )
    # Kubernetes modes keep GIE's behaviour (ready without pods) unless asked
    assert parse_options(["--pool-name", "p"], env={}).ready_requires_endpoint is False
    assert (
        parse_options(["--pool-name", "p", "--ready-requires-endpoint"], env={}).ready_requires_endpoint
        is True
    )
