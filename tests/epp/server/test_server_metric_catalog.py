"""The upstream metric catalog: provenance, and a scrape of a real ``epp`` process per naming scheme."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import orjson
import pytest
from aiohttp import web
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3.external_processor_pb2 import HttpHeaders, ProcessingRequest
from prometheus_client.parser import text_string_to_metric_families
from srv_helpers import free_port, request_body, request_headers, response_body, stub

from epp.server.metric_catalog import CATALOG, NOT_EXPOSED, OPT_IN, Family, Naming, Scheme

HERE = Path(__file__).resolve().parent
UPSTREAM_LIST = HERE / "upstream_metrics.tsv"
ROUTER_MIRROR = Path("/work/.mirror/llm-d+llm-d-router/repo")
ROUTER_COMMIT = "ebab687927f5331c1b39defcb579a07951bce56c"
# Labels upstream defines in shared variables of pkg/epp/metrics/metrics.go (modelLabels, ...).
SHARED_LABELS = frozenset({"model_name", "target_model_name", "pod_name", "fairness_id", "priority",
                           "streaming", "name", "namespace", "port", "endpoint_name"})  # fmt: skip
PREFIXES = ("llm_d_epp_", "inference_objective_", "inference_pool_", "inference_extension_",
            "llm_d_inference_scheduler_")  # fmt: skip


def _upstream() -> dict[str, tuple[str, tuple[str, ...], tuple[float, ...], str]]:
    """name -> (type, labels, buckets, source path), from the checked-in upstream list."""
    rows = {}
    for line in UPSTREAM_LIST.read_text().splitlines():
        if line.startswith("#"):
            continue
        name, kind, labels, buckets, path = line.split("\t")
        rows[name] = (
            kind,
            tuple(labels.split(",")) if labels else (),
            tuple(float(b) for b in buckets.split(",")) if buckets != "-" else (),
            path,
        )
    return rows


def _exposed(family: Family, scheme: Scheme) -> str | None:
    """The name as exposed (counters with ``_total``), or None."""
    name = family.name(scheme)
    if name is None:
        return None
    return name + "_total" if family.kind == "counter" else name


def test_the_catalog_is_exactly_the_upstream_list() -> None:
    upstream = _upstream()
    ours = {}
    for family in CATALOG:
        for scheme in Scheme:
            name = _exposed(family, scheme)
            if name is not None:
                buckets = tuple(float(b) for b in family.buckets) if family.kind == "histogram" else ()
                ours[name] = (family.kind, family.labels(scheme), buckets)
    assert set(ours) == set(upstream)
    for name, (kind, labels, buckets, _) in upstream.items():
        assert ours[name] == (kind, labels, buckets), name


def test_the_upstream_list_names_its_source_commit() -> None:
    header = [ln for ln in UPSTREAM_LIST.read_text().splitlines() if ln.startswith("#")]
    assert any("github.com/llm-d/llm-d-router" in ln and ROUTER_COMMIT in ln for ln in header)


@pytest.mark.skipif(not ROUTER_MIRROR.exists(), reason="needs the llm-d-router mirror")
def test_every_listed_name_is_in_its_upstream_source_file() -> None:
    sources: dict[str, str] = {}
    for name, (kind, labels, _, path) in _upstream().items():
        if path not in sources:
            sources[path] = subprocess.run(
                ["git", "-C", str(ROUTER_MIRROR), "show", f"{ROUTER_COMMIT}:{path}"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
        text = sources[path]
        short = next(name.removeprefix(p) for p in PREFIXES if name.startswith(p))
        assert f'"{short}"' in text or f'"{name}"' in text, (name, path)
        for label in labels:  # labels spelt in the file, or in the shared label-set variables
            assert f'"{label}"' in text or label in SHARED_LABELS, (name, label)
        assert kind.capitalize() in text, (name, kind)


# ------------------------------------------------------------------------------ a real picker process

VLLM_METRICS = b"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m1"} 2
vllm:num_requests_running{model_name="m1"} 1
vllm:kv_cache_usage_perc{model_name="m1"} 0.25
vllm:cache_config_info{block_size="16",num_gpu_blocks="1024"} 1
"""
MODELS = orjson.dumps({"object": "list", "data": [{"id": "m1", "root": "m1", "parent": None}]})
PROMPT = "tell me a story about a dragon and a knight " * 10


@pytest.fixture
async def fleet() -> AsyncIterator[list[str]]:
    """A good fake vLLM server, one whose /metrics cannot be extracted, and an address nobody serves."""
    runners, addresses = [], []
    for body in (VLLM_METRICS, b"# nothing useful here\n"):
        app = web.Application()

        async def metrics(_: web.Request, body: bytes = body) -> web.Response:
            return web.Response(body=body, content_type="text/plain")

        async def models(_: web.Request) -> web.Response:
            return web.Response(body=MODELS, content_type="application/json")

        app.router.add_get("/metrics", metrics)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        addresses.append(f"127.0.0.1:{port}")
    addresses.append(f"127.0.0.1:{free_port()}")
    try:
        yield addresses
    finally:
        for runner in runners:
            await runner.cleanup()


def _sse_headers() -> ProcessingRequest:
    headers = [HeaderValue(key=":status", raw_value=b"200"),
               HeaderValue(key="content-type", raw_value=b"text/event-stream")]  # fmt: skip
    return ProcessingRequest(response_headers=HttpHeaders(headers=HeaderMap(headers=headers)))


def _sse(event: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


async def _traffic(grpc_port: int) -> None:
    """A streamed (SSE) completion with usage, routed twice (prefix hits), and a bad request."""
    body = orjson.dumps({"model": "m1", "prompt": PROMPT, "stream": True})
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
        for i in range(2):
            call = stub(ch).Process()
            await call.write(
                request_headers({"x-request-id": f"r{i}", "x-gateway-inference-fairness-id": "t1"})
            )
            await call.write(request_body(body))
            await call.read()  # routed
            await call.write(_sse_headers())
            await call.read()
            chunks = [
                _sse({"choices": [{"text": "a"}]}),
                _sse({"choices": [{"text": "b"}]}),
                _sse(
                    {
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 90,
                            "completion_tokens": 3,
                            "total_tokens": 93,
                            "prompt_tokens_details": {"cached_tokens": 16},
                        },
                    }
                )
                + b"data: [DONE]\n\n",
            ]
            for n, chunk in enumerate(chunks):
                await asyncio.sleep(0.01)
                await call.write(response_body(chunk, end_of_stream=n == len(chunks) - 1))
                await call.read()
            await call.done_writing()
        call = stub(ch).Process()
        await call.write(request_headers())
        await call.write(request_body(b"not json"))
        await call.read()
        call.cancel()


async def _scrape(port: int) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as r:
        assert r.status == 200
        return await r.text()


async def _until(predicate_port: int, needle: str, timeout: float = 15.0) -> str:
    text = ""
    for _ in range(int(timeout / 0.1)):
        try:
            text = await _scrape(predicate_port)
        except aiohttp.ClientError:
            text = ""
        if needle in text:
            return text
        await asyncio.sleep(0.1)
    raise AssertionError(f"{needle!r} never appeared on /metrics")


# Families the traffic above must give samples (the rest may be empty: flow control, for one).
WITH_SAMPLES = {
    "request_total", "request_error_total", "request_duration_seconds", "request_size", "response_size",
    "input_tokens", "output_tokens", "cached_tokens", "running", "ntpot", "ttft", "tpot", "itl",
    "pool_avg_kv", "pool_avg_queue", "pool_avg_running", "pool_std_kv", "pool_std_queue", "pool_std_running",
    "pool_ready", "pool_per_endpoint_queue", "scheduler_e2e", "scheduler_attempts", "plugin_duration",
    "request_processing", "response_processing", "info", "datalayer_poll_errors", "datalayer_extract_errors",
    "prefix_size", "prefix_hit_ratio", "prefix_hit_bytes",
}  # fmt: skip


@pytest.mark.parametrize("naming", ["both", "llm-d", "inference"])
async def test_a_started_picker_exports_every_upstream_family_of_its_scheme(
    fleet: list[str], naming: str
) -> None:
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    flags = [
        "--endpoints", ",".join(fleet), "--host", "127.0.0.1", "--grpc-port", str(grpc_port),
        "--grpc-health-port", str(health_port), "--metrics-port", str(metrics_port),
        "--secure-serving=false", "--metrics-endpoint-auth=false", "--refresh-metrics-interval=50ms",
        "--metrics-naming", naming,
    ]  # fmt: skip
    streams = naming == "both"  # the opt-in stream metrics, in one of the runs
    if streams:
        flags.append("--enable-grpc-stream-metrics")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "epp", *flags, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        ready = "llm_d_epp_ready_endpoints" if naming != "inference" else "inference_pool_ready_pods"
        await _until(metrics_port, f'{ready}{{name="default"}} 1.0')
        await _traffic(grpc_port)
        text = await _until(metrics_port, "extract_errors_total{")
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 15)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    chosen = Naming(naming)
    for family in CATALOG:
        for scheme in Scheme:
            name = family.name(scheme)
            if name is None:
                continue
            exported = (
                chosen.exports(scheme)
                and family.key not in NOT_EXPOSED
                and (family.key not in OPT_IN or streams)
            )
            if not exported:
                assert name not in families, name
                continue
            assert name in families, name
            got = families[name]
            assert got.type == family.kind, name
            if family.key in WITH_SAMPLES or family.key in OPT_IN:
                assert got.samples, name
            for sample in got.samples:
                labels = set(sample.labels) - {"le"}
                assert labels == set(family.labels(scheme)), (name, sample)
    if chosen is not Naming.INFERENCE:
        ttft = families["llm_d_epp_request_ttft_seconds"].samples
        assert {s.labels["streaming"] for s in ttft} == {"true"}
        assert {s.labels["fairness_id"] for s in ttft} == {"t1"}
        tpot = [
            s
            for s in families["llm_d_epp_request_streaming_tpot_seconds"].samples
            if s.name.endswith("_count")
        ]
        assert sum(s.value for s in tpot) == 2
        errors = families["llm_d_epp_request_error"].samples
        assert [s.labels["error_code"] for s in errors if s.name.endswith("_total")] == ["BadRequest"]
        polls = families["llm_d_epp_datalayer_poll_errors"].samples
        assert {s.labels["source_type"] for s in polls if s.value > 0} >= {"metrics-data-source"}
        extracts = families["llm_d_epp_datalayer_extract_errors"].samples
        assert ("metrics-data-source", "core-metrics-extractor") in {
            (s.labels["source_type"], s.labels["extractor_type"]) for s in extracts
        }
        attempts = [s for s in families["llm_d_epp_scheduler_attempts"].samples if s.name.endswith("_total")]
        assert [(s.labels["status"], s.labels["port"], s.value) for s in attempts] == [
            ("success", fleet[0].rpartition(":")[2], 2.0)
        ]
        if streams:
            closed = {s.labels["code"]: s.value for s in families["llm_d_epp_extproc_streams"].samples
                      if s.name.endswith("_total")}  # fmt: skip
            assert closed == {"OK": 3.0}
            assert families["llm_d_epp_extproc_streams_inflight"].samples[0].value == 0
        hits = [s for s in families["llm_d_epp_prefix_indexer_hit_bytes"].samples if s.name.endswith("_sum")]
        assert hits and hits[0].value > 0  # the second request hit the prefix the first one left
    else:
        errors = families["inference_objective_request_error"].samples
        assert [s.labels["error_code"] for s in errors if s.name.endswith("_total")] == ["BadRequest"]


def test_the_metrics_page_lists_every_family() -> None:
    page = (HERE.parents[2] / "docs" / "metrics.md").read_text()
    for family in CATALOG:
        for scheme in Scheme:
            name = _exposed(family, scheme)
            if name is not None:
                assert f"`{name}`" in page, name


# ------------------------------------------------------------------------------ a real P/D picker

PD_PLUGINS = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: inflight-load-producer
- type: prefill-filter
- type: decode-filter
- type: prefix-cache-scorer
- type: active-request-scorer
- type: prefix-based-pd-decider
  parameters: {nonCachedTokens: 64}
- HANDLER
- type: max-score-picker
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: prefix-cache-scorer}, {pluginRef: max-score-picker}]
- name: decode
  plugins:
  - {pluginRef: decode-filter}
  - {pluginRef: prefix-cache-scorer, weight: 2}
  - {pluginRef: active-request-scorer}
  - {pluginRef: max-score-picker}
"""
HANDLERS = {
    "disagg": "{name: h, type: disagg-profile-handler, parameters: {deciders: {prefill: prefix-based-pd-decider}}}",  # noqa: E501
    "pd": "{name: h, type: pd-profile-handler, parameters: {deciderPluginName: prefix-based-pd-decider}}",
}


async def _one_request(grpc_port: int, metrics_port: int, rid: str, prompt: str) -> str:
    """Route one streamed completion, scrape while it is in flight, then finish it."""
    body = orjson.dumps({"model": "m1", "prompt": prompt, "stream": True})
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
        call = stub(ch).Process()
        await call.write(request_headers({"x-request-id": rid, "x-gateway-inference-fairness-id": "t1"}))
        await call.write(request_body(body))
        await call.read()  # routed
        during = await _scrape(metrics_port)
        await call.write(_sse_headers())
        await call.read()
        await call.write(response_body(_sse({"choices": [{"text": "a"}]}) + b"data: [DONE]\n\n"))
        await call.read()
        await call.done_writing()
    return during


@pytest.fixture
async def pd_fleet() -> AsyncIterator[list[str]]:
    """Two fake vLLM servers: a decode and a prefill endpoint."""
    runners, addresses = [], []
    for _ in range(2):
        app = web.Application()

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=VLLM_METRICS, content_type="text/plain")

        async def models(_: web.Request) -> web.Response:
            return web.Response(body=MODELS, content_type="application/json")

        app.router.add_get("/metrics", metrics)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        addresses.append(f"127.0.0.1:{port}")
    try:
        yield addresses
    finally:
        for runner in runners:
            await runner.cleanup()


@pytest.mark.parametrize("handler", ["disagg", "pd"])
async def test_a_started_pd_picker_exports_decisions_and_inflight_load(
    pd_fleet: list[str], tmp_path: Path, handler: str
) -> None:
    decode, prefill = pd_fleet
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(
        "endpoints:\n"
        f"- {{address: '{decode}', name: decode-0, labels: {{llm-d.ai/role: decode}}}}\n"
        f"- {{address: '{prefill}', name: prefill-0, labels: {{llm-d.ai/role: prefill}}}}\n"
    )
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    flags = [
        "--endpoints-file", str(endpoints), "--host", "127.0.0.1", "--grpc-port", str(grpc_port),
        "--grpc-health-port", str(health_port), "--metrics-port", str(metrics_port),
        "--secure-serving=false", "--metrics-endpoint-auth=false", "--refresh-metrics-interval=50ms",
        "--pool-namespace", "ns1", "--config-text", PD_PLUGINS.replace("HANDLER", HANDLERS[handler]),
    ]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "epp", *flags, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        await _until(metrics_port, 'llm_d_epp_ready_endpoints{name="default"} 2.0')
        during = await _one_request(grpc_port, metrics_port, "long", PROMPT)  # 110 uncached tokens
        await _one_request(grpc_port, metrics_port, "short", "hi")
        after = await _scrape(metrics_port)
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 15)

    def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        families = {f.name: f for f in text_string_to_metric_families(text)}
        return {
            tuple(sorted(s.labels.items())): s.value
            for s in families[name].samples
            if s.name in (name, name + "_total")
        }

    def labels(**values: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(values.items()))

    inflight = {
        "namespace": "ns1",
        "producer_name": "inflight-load-producer",
        "fairness_id": "t1",
        "priority": "0",
    }
    routed = samples(during, "llm_d_epp_inflight_requests")
    assert routed == {
        labels(endpoint_name="decode-0", **inflight): 1.0,
        labels(endpoint_name="prefill-0", **inflight): 1.0,
    }
    tokens = samples(during, "llm_d_epp_inflight_tokens")
    assert set(tokens) == set(routed) and all(v > 0 for v in tokens.values())
    assert set(samples(after, "llm_d_epp_inflight_requests").values()) == {0.0}
    assert set(samples(after, "llm_d_epp_inflight_tokens").values()) == {0.0}
    kind = {"disagg": "disagg-profile-handler", "pd": "pd-profile-handler"}[handler]
    new = samples(after, f"llm_d_epp_{handler}_decision")
    assert new == {
        labels(plugin_name="h", plugin_type=kind, model_name="m1", decision_type="prefill-decode"): 1.0,
        labels(plugin_name="h", plugin_type=kind, model_name="m1", decision_type="decode-only"): 1.0,
    }
    old = samples(after, f"llm_d_inference_scheduler_{handler}_decision")
    assert old == {
        labels(model_name="m1", decision_type="prefill-decode"): 1.0,
        labels(model_name="m1", decision_type="decode-only"): 1.0,
    }
    other = "pd" if handler == "disagg" else "disagg"
    assert samples(after, f"llm_d_epp_{other}_decision") == {}  # registered, never observed
