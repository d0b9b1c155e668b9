"""The picker refuses to start on unusable TLS material of a data source, naming it (before any port)."""

from __future__ import annotations

from pathlib import Path

import pytest

from epp.app import StartupError, build_app
from epp.config.feature_gates import flow_control_from_env
from epp.config.options import parse_options

_HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"


def _config(params: str) -> str:
    return (
        _HEAD
        + "plugins:\n- type: queue-scorer\n- type: metrics-data-source\n"
        + f"  parameters: {params}\n- type: core-metrics-extractor\n"
    )


async def test_missing_ca_file_is_a_configuration_error(tmp_path: Path) -> None:
    text = _config(f"{{scheme: https, insecureSkipVerify: false, caCertPath: {tmp_path / 'ca.pem'}}}")
    options = parse_options(["--endpoints", "127.0.0.1:1", "--secure-serving=false", "--config-text", text])
    with pytest.raises(
        StartupError,
        match=r'plugins\[1\] \(metrics-data-source "metrics-data-source"\): parameters\.caCertPath: reading',
    ):
        await build_app(options)


async def test_https_from_the_flag_reads_the_ca_when_the_data_layer_is_built(tmp_path: Path) -> None:
    text = _config(f"{{insecureSkipVerify: false, caCertPath: {tmp_path / 'ca.pem'}}}")
    flags = ["--endpoints", "127.0.0.1:1", "--secure-serving=false", "--model-server-metrics-scheme", "https"]
    with pytest.raises(StartupError, match=r"dataLayer: reading CA cert .*ca\.pem"):
        await build_app(parse_options([*flags, "--config-text", text]))


@pytest.mark.parametrize(
    ("value", "enabled"), [("true", True), ("1", True), ("T", True), ("false", False), ("yes", False)]
)
def test_gie_flow_control_env_switch(value: str, enabled: bool) -> None:
    assert flow_control_from_env({"ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER": value}) is enabled
    assert flow_control_from_env({}) is False


async def test_gie_flow_control_env_switch_turns_flow_control_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER", "true")
    options = parse_options(["--endpoints", "127.0.0.1:1", "--secure-serving=false"])
    app = await build_app(options)
    flow = app.server.core.flow
    assert flow is not None and flow.config.default_ttl == 0.0  # GIE switch, GIE default: no TTL
    monkeypatch.delenv("ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER")
    assert (await build_app(options)).server.core.flow is None
