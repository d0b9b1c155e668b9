"""file-discovery (llm-d-router's EndpointDiscovery plugin) and the dataLayer.discovery section: cases
from discovery/file/plugin_test.go (llm-d-router ebab68792), the section's errors, and start-up."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from datalayer.config import DataLayerConfigError, validate_datalayer_section
from datalayer.discovery import EndpointsFileError
from datalayer.discovery.base import SpecTracker
from datalayer.discovery.file_plugin import (
    MAX_FILE_BYTES,
    FileDiscoveryPlugin,
    check_endpoints_file,
    parse_upstream_endpoints,
)
from datalayer.records import DiscoveryEvent, EndpointSpec, EventKind
from epp.app.endpoints import DiscoveryError, build_config_discovery
from epp.config.options import parse_options
from epp.config.sections import load_picker_config
from scheduler.errors import ConfigError

VALID = """
endpoints:
  - name: ep1
    namespace: ns1
    address: "10.0.0.1"
    port: "8000"
  - name: ep2
    address: "10.0.0.2"
    port: "8001"
    labels: {llm-d.ai/engine-type: sglang}
"""


class Sink:
    def __init__(self) -> None:
        self.endpoints: dict[str, EndpointSpec] = {}
        self.synced = 0

    def apply(self, events: Sequence[DiscoveryEvent]) -> None:
        for e in events:
            if e.kind is EventKind.REMOVED:
                del self.endpoints[e.spec.address]
            else:
                self.endpoints[e.spec.address] = e.spec

    def current(self) -> dict[str, EndpointSpec]:
        return dict(self.endpoints)

    def mark_synced(self) -> None:
        self.synced += 1


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a distinct mtime on coarse clocks


def test_loads_endpoints() -> None:  # TestStart_LoadsEndpoints, _DefaultNamespace, _MetricsHostIsAddressPort
    specs, errors = parse_upstream_endpoints(VALID, "f")
    assert errors == []
    assert [(s.address, s.name, s.pod_name, s.engine) for s in specs] == [
        ("10.0.0.1:8000", "ep1", "ep1", "vllm"),
        ("10.0.0.2:8001", "ep2", "ep2", "sglang"),
    ]


@pytest.mark.parametrize(
    ("address", "port", "error"),
    [
        ("not-an-ip", "8000", "invalid IPv4 address"),  # TestStart_InvalidIP
        ("::1", "8000", "invalid IPv4 address"),  # TestStart_RejectsIPv6
        ("10.0.0.1", "99999", "invalid port"),  # TestStart_InvalidPort
        ("10.0.0.1", "0", "invalid port"),
        ("10.0.0.1", "", "invalid port"),
    ],
)
def test_entry_errors_skip_the_entry(address: str, port: str, error: str, tmp_path: Path) -> None:
    text = VALID + f'  - name: bad\n    address: "{address}"\n    port: "{port}"\n'
    specs, errors = parse_upstream_endpoints(text, "f")
    assert len(specs) == 2 and len(errors) == 1 and error in errors[0] and "'bad'" in errors[0]
    path = tmp_path / "e.yaml"
    path.write_text(text)
    with pytest.raises(EndpointsFileError, match=error):  # at start any error is fatal
        check_endpoints_file(str(path))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("endpoints:\n  - name: a\n    address: 10.0.0.1\n    port: 8000\n", "port: expected a string"),
        ("endpoints: {a: 1}\n", "expected a list"),
        ("endpoints: [\n", "parsing"),
        ("- a\n", "expected a mapping"),
    ],
)
def test_file_errors(text: str, error: str) -> None:
    with pytest.raises(EndpointsFileError, match=error):
        parse_upstream_endpoints(text, "f")


def test_missing_and_oversized_files(tmp_path: Path) -> None:  # TestStart_MissingFile, _FileTooLarge
    with pytest.raises(EndpointsFileError, match="reading"):
        check_endpoints_file(str(tmp_path / "absent.yaml"))
    big = tmp_path / "big.yaml"
    big.write_text("x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(EndpointsFileError, match="exceeds 1 MiB limit"):
        check_endpoints_file(str(big))


def test_same_identity_later_wins_and_one_address_is_one_endpoint() -> None:
    text = """
endpoints:
  - {name: a, address: 10.0.0.1, port: "8000"}
  - {name: a, namespace: default, address: 10.0.0.9, port: "8000"}
  - {name: b, address: 10.0.0.9, port: "8000"}
"""
    specs, errors = parse_upstream_endpoints(text, "f")
    assert [(s.address, s.name) for s in specs] == [("10.0.0.9:8000", "a")]
    assert errors == ["endpoint 'b': 10.0.0.9:8000 is already another endpoint's address"]


async def test_reload_removes_endpoints_and_keeps_them_on_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(VALID)
    plugin, sink, tracker = FileDiscoveryPlugin("fd", str(path), True), Sink(), SpecTracker()
    plugin.load(tracker, sink)
    assert sorted(sink.endpoints) == ["10.0.0.1:8000", "10.0.0.2:8001"] and sink.synced == 1
    _write(path, 'endpoints:\n  - {name: ep1, namespace: ns1, address: "10.0.0.1", port: "8000"}\n')
    plugin.load(tracker, sink)  # TestStart_DeletesRemovedEndpoints
    assert sorted(sink.endpoints) == ["10.0.0.1:8000"]
    _write(path, "endpoints: [\n")
    plugin.load(tracker, sink)
    assert sorted(sink.endpoints) == ["10.0.0.1:8000"]
    _write(path, VALID + '  - {name: bad, address: "x", port: "1"}\n')  # entry errors on reload: skipped
    plugin.load(tracker, sink)
    assert sorted(sink.endpoints) == ["10.0.0.1:8000", "10.0.0.2:8001"]


async def test_watch_file_reloads_on_write(tmp_path: Path) -> None:  # TestStart_WatchFileReloadsOnWrite
    path = tmp_path / "e.yaml"
    path.write_text(VALID)
    sink = Sink()
    task = asyncio.create_task(FileDiscoveryPlugin("fd", str(path), True, poll_interval=0.01).run(sink))
    try:
        for _ in range(300):
            if sink.synced:
                break
            await asyncio.sleep(0.01)
        _write(path, 'endpoints:\n  - {name: ep3, address: "10.0.0.3", port: "9000"}\n')
        for _ in range(300):
            if list(sink.endpoints) == ["10.0.0.3:9000"]:
                break
            await asyncio.sleep(0.01)
        assert list(sink.endpoints) == ["10.0.0.3:9000"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


_PLUGINS: list[Any] = [{"name": "fd", "type": "file-discovery", "parameters": {"path": "/etc/e.yaml"}}]


def test_section_references_the_discovery_plugin() -> None:
    config = validate_datalayer_section({"discovery": {"pluginRef": "fd"}}, _PLUGINS)
    assert config.discovery is not None
    assert (config.discovery.plugin_type, config.discovery.name) == ("file-discovery", "fd")
    assert config.discovery.parameters == {"path": "/etc/e.yaml", "watchFile": False}
    assert validate_datalayer_section({}, _PLUGINS).discovery is None


@pytest.mark.parametrize(
    ("section", "plugins", "location", "message"),
    [
        ({"discovery": {"pluginRef": "nope"}}, _PLUGINS, "dataLayer.discovery.pluginRef", "no plugin found"),
        (
            {"discovery": {"pluginRef": "max-score-picker"}},
            [{"type": "max-score-picker"}],
            "dataLayer.discovery.pluginRef",
            "does not implement EndpointDiscovery",
        ),
        ({"discovery": "fd"}, _PLUGINS, "dataLayer.discovery", "expected a mapping"),
        ({"discovery": {"pluginRef": "fd", "x": 1}}, _PLUGINS, "dataLayer.discovery.x", "unknown parameter"),
        (
            {"discovery": {"pluginRef": "fd"}},
            [{"name": "fd", "type": "file-discovery"}],
            "plugins[0].parameters.path",
            "'path' parameter is required",  # TestFactory_MissingPath
        ),
    ],
)
def test_section_errors(section: Any, plugins: list[Any], location: str, message: str) -> None:
    with pytest.raises(DataLayerConfigError, match=message) as err:
        validate_datalayer_section(section, plugins)
    assert err.value.location == location


def _config(path: str) -> str:
    return (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        f"plugins:\n- type: file-discovery\n  parameters: {{path: {path}, watchFile: true}}\n"
        "- type: max-score-picker\ndataLayer:\n  discovery:\n    pluginRef: file-discovery\n"
    )


def test_start_up_uses_the_configured_discovery(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(VALID)
    loaded = load_picker_config(None, _config(str(path)))
    options = parse_options(["--config-text", _config(str(path))])
    assert options.discovery_mode == "config"
    built = build_config_discovery(options, loaded.data_layer.discovery)
    assert isinstance(built.discovery, FileDiscoveryPlugin) and built.discovery.watch_file
    with pytest.raises(DiscoveryError, match="both choose how endpoints are found"):
        build_config_discovery(parse_options(["--endpoints", "10.0.0.1:8000"]), loaded.data_layer.discovery)
    with pytest.raises(DiscoveryError, match="no endpoints"):
        build_config_discovery(options, None)
    path.write_text('endpoints:\n  - {name: a, address: "::1", port: "1"}\n')
    with pytest.raises(DiscoveryError, match="invalid IPv4 address"):  # the initial load fails the start
        build_config_discovery(options, loaded.data_layer.discovery)
    with pytest.raises(ConfigError, match="watchFile"):
        load_picker_config(None, _config(str(path)).replace("watchFile: true", "watchFile: 1"))


def test_resolve_keeps_the_discovery() -> None:
    config = validate_datalayer_section({"discovery": {"pluginRef": "fd"}}, _PLUGINS)
    assert config.resolve({}).discovery == config.discovery
