"""The whole picker from flags: config + data layer + servers, in-process and as an ``epp`` subprocess."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import orjson
import pytest
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from srv_helpers import destination, free_port, request_body, request_headers, stub

from epp.app import StartupError, build_app, run
from epp.cli import main
from epp.config.options import parse_options
from scheduler.types import Endpoint, LLMRequest, SchedulingResult

VLLM_METRICS = b"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m1"} %d
vllm:num_requests_running{model_name="m1"} 1
vllm:kv_cache_usage_perc{model_name="m1"} 0.25
vllm:cache_config_info{block_size="16",num_gpu_blocks="1024"} 1
"""
MODELS = orjson.dumps({"object": "list", "data": [{"id": "m1", "root": "m1", "parent": None}]})
HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
BODY = orjson.dumps({"model": "m1", "prompt": "tell me a story " * 20})


@pytest.fixture
async def model_servers() -> AsyncIterator[list[str]]:
    """Two fake vLLM servers (/metrics, /v1/models); the second has the longer queue."""
    runners, addresses = [], []
    for waiting in (0, 9):
        app = web.Application()

        async def metrics(_: web.Request, waiting: int = waiting) -> web.Response:
            return web.Response(body=VLLM_METRICS % waiting, content_type="text/plain")

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


_ROOT = Path(__file__).resolve().parents[3]


def _flags(endpoints: list[str], *extra: str) -> list[str]:
    return [
        "--endpoints", ",".join(endpoints), "--host", "127.0.0.1", "--grpc-port", str(free_port()),
        "--grpc-health-port", str(free_port()), "--metrics-port", str(free_port()), *extra,
    ]  # fmt: skip


async def _wait_scraped(metrics_port: int, count: int, timeout: float = 10.0) -> None:
    """Until ``count`` endpoints have metrics from a scrape (so routing by load is deterministic)."""
    url = f"http://127.0.0.1:{metrics_port}/debug/endpoints"
    async with aiohttp.ClientSession() as http:
        for _ in range(int(timeout / 0.05)):
            async with http.get(url) as r:
                endpoints = orjson.loads(await r.read())
            if sum(e["metrics"]["age_seconds"] is not None for e in endpoints) >= count:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("endpoints never scraped")


async def _wait_serving(
    port: int, timeout: float = 10.0, proc: asyncio.subprocess.Process | None = None
) -> None:
    """Until the health port says SERVING; with ``proc``, a picker process that exits first fails the
    wait at once with its stderr (a start that failed, e.g. a port taken, is then named)."""
    for _ in range(int(timeout / 0.05)):
        if proc is not None and proc.returncode is not None:
            assert proc.stderr is not None
            tail = (await proc.stderr.read())[-2000:].decode(errors="replace")
            raise AssertionError(f"the picker exited with {proc.returncode} before it was ready:\n{tail}")
        try:
            if await _health_of(port, "") == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.05)
    state = "" if proc is None else f" (process {'running' if proc.returncode is None else 'exited'})"
    raise AssertionError(f"picker never became ready in {timeout:g} s{state}")


async def test_in_process_picker_routes_by_load(model_servers: list[str]) -> None:
    options = parse_options(
        _flags(model_servers, "--secure-serving=false", "--refresh-metrics-interval=20ms")
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run(options, stop))
    try:
        await _wait_serving(options.grpc_health_port)
        await _wait_scraped(options.metrics_port, 2)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{options.grpc_port}") as ch:
            for _ in range(3):
                call = stub(ch).Process()
                await call.write(request_headers())
                await call.write(request_body(BODY))
                routed = await call.read()
                assert destination(routed) == (model_servers[0], model_servers[0])  # the idle one
                call.cancel()
        url = f"http://127.0.0.1:{options.metrics_port}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            text = await r.text()
        assert "inference_extension_prefix_indexer_hit_ratio_count 3.0" in text
        size = next(
            ln for ln in text.splitlines() if ln.startswith("inference_extension_prefix_indexer_size ")
        )
        assert float(size.split()[1]) > 0
        assert 'inference_pool_average_queue_size{name="default"} 4.5' in text
        url = f"http://127.0.0.1:{options.metrics_port}/debug/endpoints"
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            endpoints = orjson.loads(await r.read())
        assert [(e["address"], e["health"], e["metrics"]["waiting_queue_size"]) for e in endpoints] == [
            (model_servers[0], "healthy", 0),
            (model_servers[1], "healthy", 9),
        ]
        assert endpoints[0]["attributes"]["models"] == ["m1"]
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0


async def test_startup_errors_name_the_problem(tmp_path: Path, model_servers: list[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins: 3\n"
    )
    with pytest.raises(StartupError, match=r"bad\.yaml"):
        await build_app(parse_options(_flags(model_servers, "--config-file", str(bad))))
    flow = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nflowControl: {x: 1}\n"
    with pytest.raises(StartupError, match=r"flowControl\.x: unknown field"):
        await build_app(parse_options(_flags(model_servers, "--config-text", flow)))
    with pytest.raises(StartupError, match="--cert-path"):
        await build_app(parse_options(_flags(model_servers, "--cert-path", str(tmp_path))))
    with pytest.raises(StartupError, match="--objectives-file"):
        await build_app(
            parse_options(_flags(model_servers, "--objectives-file", str(tmp_path / "nope.yaml")))
        )


def test_check_config_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
        "plugins:\n- type: queue-scorer\n- type: max-score-picker\n"
        "parser: {type: passthrough}\n"
    )
    assert main(["check-config", str(good)]) == 0
    assert "queue-scorer" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text() + "featureGates: [flowControl]\nflowControl: {maxRequests: -1}\n")
    assert main(["check-config", str(bad)]) != 0
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "flowControl.maxRequests" in err and "non-negative" in err


@pytest.mark.parametrize("engine", ["grpcio", "h2", "ngh2"])
async def test_sigterm_drains_in_flight_streams_then_exits(model_servers: list[str], engine: str) -> None:
    flags = _flags(
        model_servers, "--secure-serving=false", "-v", "2", "--shutdown-grace-period", "300ms",
        "--grpc-engine", engine,
    )  # fmt: skip
    grpc_port, health_port = (
        int(flags[flags.index("--grpc-port") + 1]),
        int(flags[flags.index("--grpc-health-port") + 1]),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "epp", *flags, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        await _wait_serving(health_port, timeout=20, proc=proc)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            call = stub(ch).Process()
            await call.write(request_headers({"x-request-id": "in-flight"}))
            await call.write(request_body(BODY))
            await call.read()
            await call.read()  # dispatched; the response never comes
            proc.send_signal(signal.SIGTERM)
            with pytest.raises(grpc.aio.AioRpcError):
                await asyncio.wait_for(call.read(), 10)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.stderr is not None
    lines = [orjson.loads(line) for line in (await proc.stderr.read()).splitlines() if line.startswith(b"{")]
    requests = [entry for entry in lines if entry.get("event") == "request"]
    assert [(r["request_id"], r["outcome"]) for r in requests] == [("in-flight", "shutdown")]
    assert any(entry.get("event") == "shutting down" for entry in lines)


async def test_endpoints_file_mode_and_bad_file(tmp_path: Path, model_servers: list[str]) -> None:
    listing = tmp_path / "endpoints.yaml"
    listing.write_text(
        "endpoints:\n"
        + "".join(f"  - address: {a}\n    name: pod-{i}\n" for i, a in enumerate(model_servers))
    )
    flags = _flags(model_servers, "--secure-serving=false")
    flags[flags.index("--endpoints")] = "--endpoints-file"
    flags[flags.index("--endpoints-file") + 1] = str(listing)
    options = parse_options(flags)
    stop = asyncio.Event()
    task = asyncio.create_task(run(options, stop))
    try:
        await _wait_serving(options.grpc_health_port)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{options.grpc_port}") as ch:
            call = stub(ch).Process()
            await call.write(request_headers())
            await call.write(request_body(BODY))
            assert destination(await call.read())[0] in model_servers
            call.cancel()
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
    listing.write_text("endpoints:\n  - address: not-an-address\n")
    with pytest.raises(StartupError, match="--endpoints-file"):
        await build_app(options)


async def test_leader_election_without_kubernetes_stays_live_but_not_ready(
    model_servers: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    options = parse_options(_flags(model_servers, "--secure-serving=false", "--ha-enable-leader-election"))
    stop = asyncio.Event()
    task = asyncio.create_task(run(options, stop))
    try:
        for _ in range(100):
            try:
                if (
                    await _health_of(options.grpc_health_port, "liveness")
                    == health_pb2.HealthCheckResponse.SERVING
                ):
                    break
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # synced by now; the election cannot run
        assert (
            await _health_of(options.grpc_health_port, "readiness")
            == health_pb2.HealthCheckResponse.NOT_SERVING
        )
        assert (
            await _health_of(options.grpc_health_port, "liveness") == health_pb2.HealthCheckResponse.SERVING
        )
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0


async def _health_of(port: int, service: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service))
        return int(resp.status)


GIE_DATALAYER = (
    HEADER
    + """plugins:
- type: queue-scorer
- type: max-score-picker
- name: metrics
  type: metrics-data-source
  parameters: {path: /metrics}
- type: core-metrics-extractor
dataLayer:
  sources:
  - pluginRef: metrics
    extractors:
    - pluginRef: core-metrics-extractor
"""
)


async def test_gie_config_with_a_data_layer_section(
    tmp_path: Path, model_servers: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gie.yaml"
    path.write_text(GIE_DATALAYER)
    assert main(["check-config", str(path)]) == 0
    assert "pluginRef: metrics" in capsys.readouterr().out
    options = parse_options(_flags(model_servers, "--config-file", str(path), "--secure-serving=false"))
    stop = asyncio.Event()
    task = asyncio.create_task(run(options, stop))
    try:
        await _wait_serving(options.grpc_health_port)
        await _wait_scraped(options.metrics_port, 2)
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
    path.write_text(GIE_DATALAYER.replace("pluginRef: metrics\n", "pluginRef: nope\n"))
    assert main(["check-config", str(path)]) == 2
    assert "dataLayer.sources[0]" in capsys.readouterr().err


@pytest.mark.parametrize(
    "config, hooks",
    [
        ("deploy/configs/gie-default.yaml", False),
        (None, True),
        ("deploy/configs/tuned.yaml", True),
    ],  # the built-in default and tuned: active-request-scorer reads response headers
)
async def test_session_reads_response_headers_only_for_plugins_that_want_them(
    model_servers: list[str], config: str | None, hooks: bool
) -> None:
    extra = ["--config-file", str(_ROOT / config)] if config else []
    app = await build_app(parse_options(_flags(model_servers, "--secure-serving=false", *extra)))
    session_config = app.server.core.config
    assert session_config.response_header_map is hooks


CONFORMANCE = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: header-based-testing-filter
- type: destination-endpoint-served-verifier
schedulingProfiles:
- name: conformance-profile
  plugins:
  - pluginRef: header-based-testing-filter
"""


async def test_response_header_providers_reach_the_session(model_servers: list[str]) -> None:
    """The plugins' client response headers (conformance verifier, session token) are wired in."""
    flags = _flags(model_servers, "--secure-serving=false")
    plain = await build_app(parse_options(flags))
    assert plain.server.core.config.response_headers is None  # no provider: nothing to call
    app = await build_app(parse_options([*flags, "--config-text", CONFORMANCE]))
    provider = app.server.core.config.response_headers
    assert provider is not None
    req = LLMRequest(request_id="r", model="m", target_model="m")
    result = SchedulingResult(endpoints=(), profile_results={}, primary_profile="")
    assert provider(req, result, "10.0.0.1:8000") == {"x-conformance-test-served-endpoint": "10.0.0.1:8000"}


SESSION_CONFIG = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: session-affinity-scorer
- type: queue-scorer
"""


async def test_session_tokens_reach_the_client_response(model_servers: list[str]) -> None:
    plain = await build_app(parse_options(_flags(model_servers, "--secure-serving=false")))
    assert plain.server.core.config.response_headers is None
    app = await build_app(
        parse_options(_flags(model_servers, "--secure-serving=false", "--config-text", SESSION_CONFIG))
    )
    provider = app.server.core.config.response_headers
    assert provider is not None
    request = LLMRequest(request_id="r", model="m", target_model="m")
    result = SchedulingResult("default", (Endpoint("10.1.2.3:8000"),), {})
    token = base64.b64encode(b"10.1.2.3:8000").decode()
    assert provider(request, result, None) == {"x-session-token": token}
    assert provider(request, result, "10.1.2.4:8000") == {
        "x-session-token": base64.b64encode(b"10.1.2.4:8000").decode()
    }


@pytest.mark.parametrize(
    ("api_version", "logged"),
    [("inference.networking.x-k8s.io/v1alpha1", True), ("llm-d.ai/v1alpha1", False)],
)
async def test_legacy_api_version_is_logged_as_deprecated_at_start(
    model_servers: list[str], api_version: str, logged: bool
) -> None:
    from structlog.testing import capture_logs

    text = f"apiVersion: {api_version}\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n"
    with capture_logs() as logs:
        await build_app(parse_options(_flags(model_servers, "--secure-serving=false", "--config-text", text)))
    deprecations = [e for e in logs if e["event"].startswith("DEPRECATION: apiVersion")]
    assert bool(deprecations) is logged
    if logged:
        assert deprecations[0]["replacement"] == "llm-d.ai/v1alpha1"


AGENT_AND_RENDER = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: agent-identity
  parameters: {additionalSessionHeaders: [x-my-agent]}
- type: token-producer
  parameters: {modelName: m, vllm: {url: "http://127.0.0.1:9"}}
- type: queue-scorer
"""


async def test_agent_identity_and_render_step_are_wired_only_when_configured(
    model_servers: list[str],
) -> None:
    flags = _flags(model_servers, "--secure-serving=false")
    plain = await build_app(parse_options(flags))
    assert plain.server.core.config.agent_identity is None
    assert plain.server.core.renderer is None  # no vllm-backed token-producer: no pre-scheduling step
    app = await build_app(
        parse_options([*flags, "--allow-experimental-plugins", "--config-text", AGENT_AND_RENDER])
    )
    reader = app.server.core.config.agent_identity
    assert reader is not None and reader({"x-my-agent": "a", "session-id": "b"}) == "a"
    assert app.server.core.renderer is not None
    await app.server.core.renderer.aclose()
