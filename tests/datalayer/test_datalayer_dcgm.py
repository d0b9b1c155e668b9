"""dcgm-data-source + dcgm-extractor: llm-d-router's extractor_test.go table, the parameters, and a scrape
of a fake DCGM Exporter on 127.0.0.1 through the data layer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from datalayer import DataLayer, DataLayerOptions, StaticDiscovery
from datalayer.config import DataLayerConfigError, validate_datalayer_section
from datalayer.connection import Connection, SourceConnection
from datalayer.dcgm import GPU_UTILIZATION_KEY, DcgmDataSource, DcgmExtractor
from datalayer.discovery import make_spec
from datalayer.http.rawhttp import RawHttpClient
from datalayer.poller import PollSettings, SourcePoller
from datalayer.store import EndpointStore
from scheduler.plugins.attributes import resolve_attribute

_TYPE = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"


def _body(*samples: tuple[str, float]) -> str:
    lines = []
    for i, (pod, value) in enumerate(samples):
        labels = f'gpu="{i}",UUID="GPU-{i}"' + (f',pod="{pod}",namespace="default"' if pod else "")
        lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {value}")
    return _TYPE + "\n".join(lines) + "\n"


# extractor_test.go TestExtractorExtract (llm-d-router ebab68792): (pod name, body, utilization or error)
@pytest.mark.parametrize(
    ("pod", "body", "want"),
    [
        ("", "# TYPE other gauge\nother 1\n", "DCGM_FI_DEV_GPU_UTIL"),  # missing metric
        ("", _TYPE, "DCGM_FI_DEV_GPU_UTIL"),  # no samples at all (the text format cannot say more)
        ("", _body(("", 73)), 0.73),  # single GPU
        ("", _body(("", 73), ("", 81), ("", 65)), 0.81),  # multi-GPU takes max
        ("vllm-pod-2", _body(("vllm-pod-1", 25), ("vllm-pod-2", 80), ("vllm-pod-3", 10)), 0.80),  # DaemonSet
        ("vllm-pod-1", _body(("vllm-pod-1", 40), ("vllm-pod-1", 70), ("vllm-pod-2", 99)), 0.70),
        ("missing-pod", _body(("vllm-pod-1", 50)), "missing-pod"),  # no sample of this pod
        ("vllm-pod-1", _body(("", 35), ("", 60)), 0.60),  # unlabeled samples kept (sidecar)
        ("", _body(("vllm-pod-1", 20), ("vllm-pod-2", 90)), 0.90),  # no pod name: every sample
        ("", _body(("", -5)), 0.0),  # the maximum starts at 0, as upstream's
        ("", "DCGM_FI_DEV_GPU_UTIL 50\n", "expected gauge"),  # untyped
        ("", "# TYPE DCGM_FI_DEV_GPU_UTIL counter\nDCGM_FI_DEV_GPU_UTIL 50\n", "expected gauge"),
    ],
)
def test_extractor(pod: str, body: str, want: float | str) -> None:
    endpoint = make_spec("10.0.0.1:8000", "p-rank-0", pod_name=pod)
    if isinstance(want, str):
        with pytest.raises(ValueError, match=want):
            DcgmExtractor().extract(body, endpoint, 0.0)
        return
    update = DcgmExtractor().extract(body, endpoint, 0.0)
    assert update.attributes == {GPU_UTILIZATION_KEY: pytest.approx(want)}


def test_attribute_key_is_what_the_endpoint_attribute_plugins_read() -> None:
    assert resolve_attribute("GPUUtilization", "dcgm-extractor") == GPU_UTILIZATION_KEY


_PLUGINS: list[Any] = [{"name": "dcgm-source", "type": "dcgm-data-source"}, {"type": "dcgm-extractor"}]
_SECTION = {"sources": [{"pluginRef": "dcgm-source", "extractors": [{"pluginRef": "dcgm-extractor"}]}]}


def _dcgm(parameters: dict[str, Any]) -> DcgmDataSource:
    plugins = [{**_PLUGINS[0], "parameters": parameters}, _PLUGINS[1]]
    sources = validate_datalayer_section(_SECTION, plugins).build_sources()
    return next(s for s in sources if isinstance(s, DcgmDataSource))


def test_parameters_default_to_upstreams() -> None:
    source = _dcgm({})
    assert (source.path, source.interval(0.05), source.use_node_address) == ("/metrics", 0.05, False)
    assert source.connection == SourceConnection("http", 9400, True)
    assert [e.name for e in source.extractors] == ["dcgm-extractor"]
    source = _dcgm({"port": 9500, "useNodeAddress": True, "interval": "1s", "path": "m", "scheme": "https"})
    assert (source.path, source.interval(0.05), source.use_node_address) == ("/m", 1.0, True)
    assert source.connection == SourceConnection("https", 9500, True)


@pytest.mark.parametrize(
    ("parameters", "location"),
    [
        ({"scheme": "ftp"}, "parameters.scheme"),
        ({"port": 70000}, "parameters.port"),
        ({"port": "9400"}, "parameters.port"),
        ({"useNodeAddress": True, "port": 0}, "parameters.useNodeAddress"),
        ({"useNodeAddress": "yes"}, "parameters.useNodeAddress"),
        ({"interval": "soon"}, "parameters.interval"),
        ({"caCertPath": "/ca.pem"}, "parameters.caCertPath"),  # not a dcgm-data-source parameter upstream
    ],
)
def test_bad_parameters_name_the_parameter(parameters: dict[str, Any], location: str) -> None:
    with pytest.raises(DataLayerConfigError) as err:
        _dcgm(parameters)
    assert err.value.location.endswith(location)


def test_only_a_dcgm_extractor_reads_the_dcgm_source() -> None:
    section = {
        "sources": [{"pluginRef": "dcgm-source", "extractors": [{"pluginRef": "core-metrics-extractor"}]}]
    }
    with pytest.raises(DataLayerConfigError, match="dcgm-data-source cannot feed a core-metrics-extractor"):
        validate_datalayer_section(section, _PLUGINS)


async def test_scrapes_a_fake_dcgm_exporter_and_sets_the_attribute() -> None:
    """A sidecar exporter on 127.0.0.1:<port> next to a model server whose own port is never used by
    the DCGM source (the source's port replaces it)."""
    util = {"value": 42.0}

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=_body(("", util["value"]), ("", 7.0)))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    http = RawHttpClient()
    try:
        source = _dcgm({"port": port})
        layer = DataLayer(
            StaticDiscovery.from_addresses(["127.0.0.1:1"]),
            http=http,
            options=DataLayerOptions(refresh_interval=0.02),
            sources=[source],
        )
        await layer.start()
        try:
            for want in (0.42, 0.9):
                util["value"] = want * 100
                for _ in range(200):
                    record = layer.get("127.0.0.1:1")
                    if record is not None and record.attributes.get(GPU_UTILIZATION_KEY) == pytest.approx(
                        want
                    ):
                        break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError(f"GPUUtilization never became {want}")
        finally:
            await layer.stop()
    finally:
        await http.aclose()
        await runner.cleanup()


def test_use_node_address_scrapes_the_node_ip() -> None:
    def url(source: DcgmDataSource, node: str = "192.168.1.7") -> str:
        spec = make_spec("10.0.0.5:8000", "p-rank-0", pod_name="p", node_address=node)
        poller = SourcePoller(
            spec.address,
            source,
            EndpointStore(),
            {spec.address: spec},
            RawHttpClient(),
            PollSettings(0.05, 1.0, 1 << 20),
            lambda: 0.0,
            asyncio.sleep,
            source.connection.resolve(Connection("http")),
        )
        return poller.url

    assert url(_dcgm({"useNodeAddress": True})) == "http://192.168.1.7:9400/metrics"
    assert url(_dcgm({"useNodeAddress": True}), node="") == "http://10.0.0.5:9400/metrics"  # no node IP
    assert url(_dcgm({})) == "http://10.0.0.5:9400/metrics"  # sidecar
