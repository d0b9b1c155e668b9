"""Scraping real servers on 127.0.0.1 with metrics-data-source's connection parameters.

A throwaway CA signs the server certificate (SAN 127.0.0.1); another CA signs the client certificate.
Each case builds the sources from a dataLayer section as a config would (``caCertPath``,
``insecureSkipVerify``, ``clientCertPath`` / ``clientKeyPath``, ``scheme``, ``port``), runs the real
data layer (real HTTP clients, real pollers) and waits for the endpoint's health.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from dl_fakes import vllm_text
from dl_tls import MetricsServer, make_pki

from datalayer import DataLayer, DataLayerOptions, Health, StaticDiscovery
from datalayer.config import DataLayerConfigError, validate_datalayer_section
from datalayer.connection import TlsSettings, TlsSettingsError
from datalayer.http import default_http_client
from datalayer.http.rawhttp import RawHttpClient


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _sources(params: dict[str, Any]) -> Any:
    plugins = [
        {"name": "m", "type": "metrics-data-source", "parameters": params},
        {"type": "core-metrics-extractor"},
    ]
    section = {
        "sources": [{"pluginRef": "m", "extractors": [{"pluginRef": "core-metrics-extractor"}]}],
        "injectDefaults": False,
    }
    return validate_datalayer_section(section, plugins).build_sources()


async def _scrape(address: str, params: dict[str, Any], options: DataLayerOptions | None = None) -> Any:
    """Run the layer until the endpoint is scraped (healthy or unhealthy); return its record."""
    options = options or DataLayerOptions(refresh_interval=0.05)
    http = default_http_client(options.scheme, verify_tls=not options.insecure_skip_verify)  # as epp.app
    layer = DataLayer(
        StaticDiscovery.from_addresses([address]), http=http, options=options, sources=_sources(params)
    )
    await layer.start()
    try:
        async with asyncio.timeout(10):
            while (record := layer.get(address)) is None or record.health is Health.UNKNOWN:
                await asyncio.sleep(0.01)
        return record
    finally:
        await layer.stop()
        await http.aclose()


async def test_ca_verification_accepts_the_right_ca_and_rejects_another(pki: Path) -> None:
    async with MetricsServer(vllm_text(7), pki) as server:
        address = f"127.0.0.1:{server.port}"
        good = {"scheme": "https", "insecureSkipVerify": False, "caCertPath": str(pki / "ca.pem")}
        record = await _scrape(address, good)
        assert record.health is Health.HEALTHY and record.metrics.waiting_queue_size == 7
        wrong = {**good, "caCertPath": str(pki / "other-ca.pem")}
        record = await _scrape(address, wrong)
        assert record.health is Health.UNHEALTHY and "certificate" in (record.last_error or "").lower()
        system_roots = {"scheme": "https", "insecureSkipVerify": False}  # a private CA is not a system root
        assert (await _scrape(address, system_roots)).health is Health.UNHEALTHY


async def test_insecure_skip_verify_is_the_default_and_ignores_the_ca(pki: Path) -> None:
    async with MetricsServer(vllm_text(2), pki) as server:
        address = f"127.0.0.1:{server.port}"
        assert (await _scrape(address, {"scheme": "https"})).health is Health.HEALTHY
        ignored = {
            "scheme": "https",
            "caCertPath": str(pki / "other-ca.pem"),
        }  # upstream: CA unused when skipping
        assert (await _scrape(address, ignored)).health is Health.HEALTHY


async def test_client_certificate_is_presented_for_mtls(pki: Path) -> None:
    async with MetricsServer(vllm_text(3), pki, require_client_cert=True) as server:
        address = f"127.0.0.1:{server.port}"
        verify = {"scheme": "https", "insecureSkipVerify": False, "caCertPath": str(pki / "ca.pem")}
        assert (await _scrape(address, verify)).health is Health.UNHEALTHY  # no client certificate
        mtls = {**verify, "clientCertPath": str(pki / "client.pem"), "clientKeyPath": str(pki / "client.key")}
        record = await _scrape(address, mtls)
        assert record.health is Health.HEALTHY and record.metrics.waiting_queue_size == 3


async def test_port_parameter_scrapes_another_port_than_the_endpoints() -> None:
    async with MetricsServer(vllm_text(5), None) as server:
        unused = "127.0.0.1:9"  # the endpoint's own port: nothing listens there
        assert (await _scrape(unused, {})).health is Health.UNHEALTHY
        record = await _scrape(unused, {"port": server.port})
        assert record.health is Health.HEALTHY and record.metrics.waiting_queue_size == 5


async def test_https_from_the_flags_applies_when_the_source_sets_no_scheme(pki: Path) -> None:
    async with MetricsServer(vllm_text(4), pki) as server:
        address = f"127.0.0.1:{server.port}"
        options = DataLayerOptions(refresh_interval=0.05, scheme="https")  # --model-server-metrics-scheme
        assert (await _scrape(address, {}, options)).health is Health.HEALTHY
        assert (await _scrape(address, {"scheme": "http"})).health is Health.UNHEALTHY  # param wins


@pytest.mark.parametrize(
    ("params", "location", "message"),
    [
        ({"caCertPath": "/nonexistent/ca.pem", "insecureSkipVerify": False}, "caCertPath", "reading CA cert"),
        ({"caCertPath": "server.key", "insecureSkipVerify": False}, "caCertPath", "no valid CA certs"),
        ({"clientCertPath": "client.pem"}, "clientCertPath", "set together"),
        (
            {"clientCertPath": "client.pem", "clientKeyPath": "server.key"},
            "clientCertPath",
            "loading client cert",
        ),
    ],
)
def test_tls_files_are_read_at_load_for_https(
    pki: Path, params: dict[str, str], location: str, message: str
) -> None:
    resolved = {
        k: (str(pki / v) if k != "insecureSkipVerify" and not v.startswith("/") else v)
        for k, v in params.items()
    }
    with pytest.raises(DataLayerConfigError) as err:
        _sources({"scheme": "https", **resolved})
    assert err.value.location == f"plugins[0].parameters.{location}"
    assert message in err.value.message
    _sources({"scheme": "http", **resolved})  # upstream reads TLS files for https only


def test_data_layer_reads_tls_files_at_construction_when_https_comes_from_flags(pki: Path) -> None:
    sources = _sources({"insecureSkipVerify": False, "caCertPath": str(pki / "missing.pem")})
    with pytest.raises(TlsSettingsError, match="reading CA cert"):
        DataLayer(
            StaticDiscovery.from_addresses(["127.0.0.1:1"]),
            http=RawHttpClient(),
            options=DataLayerOptions(scheme="https"),
            sources=sources,
        )
    assert TlsSettings().ssl_context().verify_mode.name == "CERT_NONE"


async def test_models_source_takes_the_same_tls_parameters(pki: Path) -> None:
    async with MetricsServer(vllm_text(1), pki) as server:
        address = f"127.0.0.1:{server.port}"
        tls = {"scheme": "https", "insecureSkipVerify": False, "caCertPath": str(pki / "ca.pem")}
        plugins = [
            {"name": "m", "type": "metrics-data-source", "parameters": tls},
            {"name": "v", "type": "models-data-source", "parameters": {**tls, "interval": "100ms"}},
            {"type": "core-metrics-extractor"},
        ]
        section = {
            "sources": [
                {"pluginRef": "m", "extractors": [{"pluginRef": "core-metrics-extractor"}]},
                {"pluginRef": "v"},
            ]
        }
        http = RawHttpClient()
        layer = DataLayer(
            StaticDiscovery.from_addresses([address]),
            http=http,
            options=DataLayerOptions(refresh_interval=0.05),
            sources=validate_datalayer_section(section, plugins).build_sources(),
        )
        await layer.start()
        try:
            async with asyncio.timeout(10):
                while (record := layer.get(address)) is None or "models" not in record.attributes:
                    await asyncio.sleep(0.01)
        finally:
            await layer.stop()
            await http.aclose()
        assert record.attributes["models"] == frozenset({"base"}) and record.health is Health.HEALTHY
