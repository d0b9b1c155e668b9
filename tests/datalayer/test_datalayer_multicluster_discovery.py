"""multicluster-file-discovery (llm-d-router): peer clusters as endpoints, addressed by IP or gateway
host name, with an optional metrics address from labels. Cases from discovery/file/multicluster_test.go
(llm-d-router ebab68792), the scrape target in the poller, and the real ``epp`` process scraping one
``epp-sim`` for an endpoint that routes to another."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from datalayer.config import validate_datalayer_section
from datalayer.connection import Connection
from datalayer.discovery import EndpointsFileError
from datalayer.discovery.base import SpecTracker, make_spec
from datalayer.discovery.file_plugin import (
    FileDiscoveryPlugin,
    check_endpoints_file,
    parse_upstream_endpoints,
    valid_host_or_ip,
)
from datalayer.http.rawhttp import RawHttpClient
from datalayer.poller import PollSettings, SourcePoller
from datalayer.sources import MetricsDataSource
from datalayer.store import EndpointStore
from devtools.stack import ManagedProcess, free_ports
from epp.app.endpoints import build_config_discovery
from epp.config.options import parse_options
from epp.config.sections import load_picker_config

CLUSTER = 'endpoints:\n  - name: cluster-a\n    address: "gw.cluster-a.example.com"\n    port: "443"\n'


def _one(text: str) -> Any:
    specs, errors = parse_upstream_endpoints(text, "f", multicluster=True)
    assert errors == []
    assert len(specs) == 1
    return specs[0]


def test_a_gateway_host_name_is_an_endpoint_and_its_own_metrics_host() -> None:
    # TestMultiClusterFactory_AcceptsHostname: the scrape target is host:port
    spec = _one(CLUSTER)
    assert (spec.address, spec.name, spec.metrics_host) == ("gw.cluster-a.example.com:443", "cluster-a", "")
    assert _url(spec) == "http://gw.cluster-a.example.com:443/metrics"


def test_the_stock_discovery_still_rejects_a_host_name(tmp_path: Path) -> None:
    # TestFileDiscovery_StockRejectsHostname
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER)
    with pytest.raises(EndpointsFileError, match="invalid IPv4 address"):
        check_endpoints_file(str(path))
    assert check_endpoints_file(str(path), multicluster=True)[0].address == "gw.cluster-a.example.com:443"


@pytest.mark.parametrize(
    ("address", "ok"),
    [  # TestValidateHostOrIP
        ("10.0.0.1", True),
        ("::1", True),
        ("gw.cluster-a.example.com", True),
        ("gateway", True),
        ("gw.example.com.", False),
        ("GW.example.com", False),
        ("3com.example.com", True),
        ("", False),
        ("gw_1.example.com", False),
        ("12345", True),
        ("gw:443", False),
        ("gw\x00.example.com", False),
        ("user@host", False),
        ("-bad.example.com", False),
        ("gw..example.com", False),
        ("a" * 254, False),  # over IsDNS1123Subdomain's 253
    ],
)
def test_validate_host_or_ip(address: str, ok: bool) -> None:
    assert valid_host_or_ip(address) is ok


@pytest.mark.parametrize(
    ("labels", "want"),
    [  # TestMetricsHostFromLabels (endpoint 10.0.0.12:8080)
        ({"metricsAddress": "10.0.0.11", "metricsPort": "9090"}, "10.0.0.11:9090"),
        ({"metricsAddress": "10.0.0.11"}, "10.0.0.11:8080"),
        ({"metricsPort": "9090"}, "10.0.0.12:8080"),
        ({}, "10.0.0.12:8080"),
        ({"metricsAddress": "gw.example.com", "metricsPort": "443"}, "gw.example.com:443"),
        ({"metricsAddress": "fd00::1", "metricsPort": "9090"}, "[fd00::1]:9090"),
    ],
)
def test_metrics_host_from_labels(labels: dict[str, str], want: str) -> None:
    labels_yaml = "{" + ", ".join(f"{k}: {v!r}" for k, v in labels.items()) + "}"
    spec = _one(f'endpoints:\n  - {{name: s, address: "10.0.0.12", port: "8080", labels: {labels_yaml}}}\n')
    assert spec.address == "10.0.0.12:8080"
    assert _url(spec) == f"http://{want}/metrics"


def test_bad_metrics_labels_and_addresses_are_entry_errors() -> None:
    text = """
endpoints:
  - {name: ok, address: "fd00::2", port: "8000"}
  - {name: bad-host, address: "gw_1.example.com", port: "443"}
  - {name: bad-maddr, address: "10.0.0.1", port: "443", labels: {metricsAddress: "x:1"}}
  - {name: bad-mport, address: "10.0.0.2", port: "1", labels: {metricsAddress: "10.0.0.3", metricsPort: "0"}}
"""
    specs, errors = parse_upstream_endpoints(text, "f", multicluster=True)
    assert [s.address for s in specs] == ["[fd00::2]:8000"]
    assert errors == [
        "endpoint 'bad-host': invalid host 'gw_1.example.com'",
        "endpoint 'bad-maddr': invalid metricsAddress label 'x:1'",
        "endpoint 'bad-mport': invalid metricsPort label '0'",
    ]
    # the stock plugin ignores the labels (upstream: only the multicluster wrapper reads them)
    stock, _ = parse_upstream_endpoints(
        'endpoints:\n  - {name: a, address: "10.0.0.1", port: "1", labels: {metricsAddress: "10.0.0.2"}}\n',
        "f",
    )
    assert stock[0].metrics_host == ""


def _url(spec: Any, connection: Connection | None = None) -> str:
    poller = SourcePoller(
        spec.address,
        MetricsDataSource(),
        EndpointStore(),
        {spec.address: spec},
        RawHttpClient(),
        PollSettings(0.05, 1.0, 1 << 20),
        lambda: 0.0,
        asyncio.sleep,
        connection,
    )
    return poller.url


def test_a_source_port_overrides_the_metrics_host_as_upstream() -> None:
    """Upstream's portOverride scrapes the endpoint's own IP at that port, whatever MetricsHost says."""
    spec = make_spec("10.0.0.12:8080", "s", metrics_host="10.0.0.11:9090")
    assert _url(spec, Connection("https")) == "https://10.0.0.11:9090/metrics"
    assert _url(spec, Connection("https", 9400)) == "https://10.0.0.12:9400/metrics"


async def test_the_poller_follows_an_updated_metrics_host() -> None:
    old = make_spec("10.0.0.12:8080", "s")
    specs = {old.address: old}
    poller = SourcePoller(
        old.address, MetricsDataSource(), EndpointStore(), specs, RawHttpClient(),
        PollSettings(0.05, 0.05, 1 << 20), time.monotonic, asyncio.sleep,
    )  # fmt: skip
    assert poller.url == "http://10.0.0.12:8080/metrics"
    specs[old.address] = make_spec(old.address, "s", metrics_host="127.0.0.1:1")
    await poller.poll_once()  # connection refused: a failed poll, but at the new target
    assert poller.url == "http://127.0.0.1:1/metrics"


async def test_reload_keeps_the_multicluster_rules(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER)
    plugin = FileDiscoveryPlugin("mc", str(path), True, multicluster=True)
    assert plugin.plugin_type == "multicluster-file-discovery"
    events: list[Any] = []

    class Sink:
        def apply(self, batch: Any) -> None:
            events.extend(batch)

        def current(self) -> dict[str, Any]:
            return {}

        def mark_synced(self) -> None:
            pass

    plugin.load(SpecTracker(), Sink())
    assert [e.spec.address for e in events] == ["gw.cluster-a.example.com:443"]


def test_section_and_start_up(tmp_path: Path) -> None:
    # TestMultiClusterFactory_Type: the plugin keeps its type and name
    plugins: list[Any] = [
        {
            "name": "mc",
            "type": "multicluster-file-discovery",
            "parameters": {"path": "/c.yaml", "watchFile": True},
        }
    ]
    config = validate_datalayer_section({"discovery": {"pluginRef": "mc"}}, plugins)
    assert config.discovery is not None
    assert (config.discovery.plugin_type, config.discovery.name) == ("multicluster-file-discovery", "mc")
    assert config.discovery.parameters == {"path": "/c.yaml", "watchFile": True}
    path = tmp_path / "c.yaml"
    path.write_text(CLUSTER)
    text = _config(str(path))
    built = build_config_discovery(
        parse_options(["--config-text", text]), load_picker_config(None, text).data_layer.discovery
    )
    assert isinstance(built.discovery, FileDiscoveryPlugin) and built.discovery.multicluster


def _config(path: str, extra: str = "") -> str:
    return (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        f"plugins:\n- type: multicluster-file-discovery\n  name: clusters\n  parameters: {{path: {path}}}\n"
        f"- type: max-score-picker\ndataLayer:\n  discovery:\n    pluginRef: clusters\n{extra}"
    )


def _endpoints(metrics_port: int) -> list[dict[str, Any]]:
    try:
        r = httpx.get(f"http://127.0.0.1:{metrics_port}/debug/endpoints", timeout=2)
    except httpx.HTTPError:
        return []
    return list(r.json()) if r.status_code == 200 else []


@pytest.mark.timeout(90)
def test_the_real_picker_scrapes_the_metrics_address_of_a_cluster_endpoint(tmp_path: Path) -> None:
    """One endpoint routes to sim A (max LoRAs 1) and publishes its metrics at sim B (max LoRAs 7, by
    host name ``localhost``): the picker's view of the endpoint shows B's metrics."""
    sim_a, sim_b, grpc_port, health_port, metrics_port = free_ports(5)
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(
        "endpoints:\n  - name: peer\n    address: 127.0.0.1\n"
        f'    port: "{sim_a}"\n    labels: {{metricsAddress: localhost, metricsPort: "{sim_b}"}}\n'
    )
    config = tmp_path / "epp.yaml"
    config.write_text(_config(str(clusters)))
    procs = [
        ManagedProcess(
            "sim-a", [sys.executable, "-m", "simulator", "--port", str(sim_a)], tmp_path / "a.log"
        ),
        ManagedProcess(
            "sim-b",
            [sys.executable, "-m", "simulator", "--port", str(sim_b), "--max-loras", "7"],
            tmp_path / "b.log",
        ),
        ManagedProcess(
            "epp",
            [
                sys.executable,
                "-m",
                "epp",
                "--config-file",
                str(config),
                "--host",
                "127.0.0.1",
                "--grpc-port",
                str(grpc_port),
                "--grpc-health-port",
                str(health_port),
                "--metrics-port",
                str(metrics_port),
                "--secure-serving=false",
                "--refresh-metrics-interval=50ms",
                "--allow-experimental-plugins",
            ],
            tmp_path / "epp.log",
        ),
    ]
    try:
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + 60
        seen: list[dict[str, Any]] = []
        while time.monotonic() < deadline and procs[2].running():
            seen = _endpoints(metrics_port)
            if seen and seen[0]["metrics"]["max_lora"] == 7:
                break
            time.sleep(0.2)
        assert [e["address"] for e in seen] == [f"127.0.0.1:{sim_a}"], (tmp_path / "epp.log").read_text()[
            -3000:
        ]
        assert seen[0]["metrics"]["max_lora"] == 7, seen
    finally:
        for proc in reversed(procs):
            proc.stop()
