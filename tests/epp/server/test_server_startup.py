"""Start-up tells the truth: names resolved or refused, and ready only once an endpoint answered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import grpc
import orjson
import pytest
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from srv_helpers import destination, free_port, request_body, request_headers, stub
from structlog.testing import capture_logs

from datalayer.discovery import ResolveError, ResolvingDiscovery, StaticDiscovery
from datalayer.records import EndpointMetrics, EndpointRecord, Health
from epp.app import StartupError, build_app, run
from epp.app.endpoints import DiscoveryError, build_discovery
from epp.app.readiness import wait_for_an_answer
from epp.config.options import parse_options

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
METRICS = b"""vllm:num_requests_waiting{model_name="m1"} 0
vllm:num_requests_running{model_name="m1"} 0
vllm:kv_cache_usage_perc{model_name="m1"} 0.1
"""
BODY = orjson.dumps({"model": "m1", "prompt": "hello " * 10})


class FakeResolver:
    def __init__(self, table: dict[str, tuple[str, ...]]) -> None:
        self.table = table

    async def resolve(self, name: str) -> tuple[str, ...]:
        if name not in self.table:
            raise ResolveError("Name or service not known")
        return self.table[name]


# -- names at start-up --------------------------------------------------------------------------


async def test_static_list_with_names_is_resolved_and_ip_lists_stay_plain() -> None:
    resolver = FakeResolver({"vllm-a": ("10.0.0.1",)})
    options = parse_options(["--endpoints", "vllm-a:8000", "--endpoints-resolve-interval", "2s"], env={})
    built = await build_discovery(options, resolver=resolver)
    assert isinstance(built.discovery, ResolvingDiscovery) and built.discovery.interval == 2.0
    plain = await build_discovery(parse_options(["--endpoints", "10.0.0.1:8000"], env={}), resolver=resolver)
    assert isinstance(plain.discovery, StaticDiscovery)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--endpoints", "10.0.0.1:80,vllm-b:8000"],
            "--endpoints: cannot resolve host name 'vllm-b': Name or",
        ),
        (
            ["--endpoints", "vllm-a:8000,10.0.0.1:8000"],
            "--endpoints: 10.0.0.1:8000 and vllm-a:8000 are the same endpoint 10.0.0.1:8000",
        ),
    ],
)
async def test_static_names_that_do_not_resolve_are_refused(args: list[str], message: str) -> None:
    resolver = FakeResolver({"vllm-a": ("10.0.0.1",)})
    with pytest.raises(DiscoveryError, match=message):
        await build_discovery(parse_options(args, env={}), resolver=resolver)


async def test_file_names_that_do_not_resolve_are_refused_naming_file_and_entry(tmp_path: Path) -> None:
    path = tmp_path / "eps.yaml"
    path.write_text("endpoints:\n  - vllm-a:8000\n  - address: vllm-typo:8000\n    name: b\n")
    options = parse_options(["--endpoints-file", str(path)], env={})
    with pytest.raises(DiscoveryError) as caught:
        await build_discovery(options, resolver=FakeResolver({"vllm-a": ("10.0.0.1",)}))
    assert str(caught.value) == (
        f"--endpoints-file: {path}: endpoints[1].address: cannot resolve host name 'vllm-typo': "
        "Name or service not known"
    )


async def test_hosts_file_is_read_first_and_checked_at_start(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.1.2.3 vllm-a\n")
    options = parse_options(["--endpoints", "vllm-a:8000", "--endpoints-hosts-file", str(hosts)], env={})
    built = await build_discovery(options, resolver=FakeResolver({}))
    assert isinstance(built.discovery, ResolvingDiscovery)
    hosts.write_text("10.1.2.3\n")
    with pytest.raises(DiscoveryError, match=r"--endpoints-hosts-file: .*hosts: line 1: expected 'IP name"):
        await build_discovery(options, resolver=FakeResolver({}))


async def test_build_app_reports_an_unresolvable_name_as_a_startup_error() -> None:
    options = parse_options(["--endpoints", "no-such-host.invalid:8000", "--secure-serving=false"], env={})
    with pytest.raises(StartupError, match=r"--endpoints: cannot resolve host name 'no-such-host\.invalid'"):
        await build_app(options)


# -- readiness ----------------------------------------------------------------------------------


def _record(address: str, health: Health, error: str | None = None, scraped: bool = False) -> EndpointRecord:
    metrics = EndpointMetrics(updated_at=5.0 if scraped else 0.0)
    return EndpointRecord(address, f"ep-{address}", health=health, last_error=error, metrics=metrics)


async def test_wait_for_an_answer_warns_once_per_unreachable_set_naming_each_endpoint() -> None:
    a, b = "10.0.0.1:80", "10.0.0.2:80"
    frames: list[Sequence[EndpointRecord]] = [
        [_record(a, Health.UNKNOWN), _record(b, Health.UNKNOWN)],  # not tried yet: no warning
        [_record(a, Health.UNHEALTHY, "refused"), _record(b, Health.UNKNOWN)],
        [_record(a, Health.UNHEALTHY, "refused"), _record(b, Health.UNHEALTHY, "timeout")],
        [_record(a, Health.UNHEALTHY, "refused"), _record(b, Health.UNHEALTHY, "timeout again")],
        [_record(a, Health.UNHEALTHY, "refused"), _record(b, Health.STALE, "old", scraped=True)],
    ]
    snapshot: Callable[[], Sequence[EndpointRecord]] = lambda: frames[0]  # noqa: E731

    async def next_frame(_: float) -> None:
        frames.pop(0)

    import structlog

    with capture_logs() as logs:
        count = await wait_for_an_answer(snapshot, structlog.get_logger("t"), "not ready", sleep=next_frame)
    assert count == 1  # an endpoint that answered once counts, even if stale now
    assert [e["event"] for e in logs] == ["not ready"]
    assert logs[0]["unreachable"] == [
        {"endpoint": f"ep-{a}", "address": a, "error": "refused"},
        {"endpoint": f"ep-{b}", "address": b, "error": "timeout"},
    ]


async def _status(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
        return int(reply.status)


async def _eventually_status(port: int, wanted: int, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        try:
            if await _status(port) == wanted:
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"health never became {wanted}")


async def _model_server(port: int) -> web.AppRunner:
    app = web.Application()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=METRICS, content_type="text/plain")

    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def _flags(endpoints: str, *extra: str) -> list[str]:
    return [
        "--endpoints", endpoints, "--host", "127.0.0.1", "--secure-serving=false",
        "--grpc-port", str(free_port()), "--grpc-health-port", str(free_port()),
        "--metrics-port", str(free_port()), "--refresh-metrics-interval", "20ms", *extra,
    ]  # fmt: skip


@pytest.fixture
async def running() -> AsyncIterator[Callable[[list[str]], asyncio.Task[int]]]:
    tasks: list[tuple[asyncio.Event, asyncio.Task[int]]] = []

    def start(flags: list[str]) -> asyncio.Task[int]:
        stop = asyncio.Event()
        task = asyncio.create_task(run(parse_options(flags, env={}), stop))
        tasks.append((stop, task))
        return task

    yield start
    for stop, task in tasks:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0


async def test_not_ready_until_an_endpoint_answers_then_ready(
    running: Callable[[list[str]], asyncio.Task[int]],
) -> None:
    port = free_port()
    flags = _flags(f"127.0.0.1:{port}")
    health = int(flags[flags.index("--grpc-health-port") + 1])
    with capture_logs() as logs:
        running(flags)
        for _ in range(200):
            if any(e["event"].endswith("not ready") for e in logs):
                break
            await asyncio.sleep(0.05)
        assert await _status(health) == NOT_SERVING
        runner = await _model_server(port)
        try:
            await _eventually_status(health, SERVING)
        finally:
            await runner.cleanup()
    warning = next(e for e in logs if e["event"] == "no endpoint has answered a scrape yet: not ready")
    assert [u["address"] for u in warning["unreachable"]] == [f"127.0.0.1:{port}"]
    assert warning["unreachable"][0]["error"]
    ready = next(e for e in logs if e["event"] == "endpoints synced: ready")
    assert ready["answered"] == 1


async def test_gie_behaviour_on_request_ready_without_an_answering_endpoint(
    running: Callable[[list[str]], asyncio.Task[int]],
) -> None:
    flags = _flags(f"127.0.0.1:{free_port()}", "--ready-requires-endpoint=false")
    with capture_logs() as logs:
        running(flags)
        await _eventually_status(int(flags[flags.index("--grpc-health-port") + 1]), SERVING)
        for _ in range(200):
            if any(e["event"] == "no endpoint has answered a scrape yet" for e in logs):
                break
            await asyncio.sleep(0.05)
    events = [e["event"] for e in logs]
    assert "endpoints synced: ready" in events and "no endpoint has answered a scrape yet" in events


async def test_a_name_is_routed_to_its_ip_address(
    running: Callable[[list[str]], asyncio.Task[int]], tmp_path: Path
) -> None:
    port = free_port()
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 model-server.test\n")
    flags = _flags(f"model-server.test:{port}", "--endpoints-hosts-file", str(hosts))
    runner = await _model_server(port)
    try:
        running(flags)
        await _eventually_status(int(flags[flags.index("--grpc-health-port") + 1]), SERVING)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{flags[flags.index('--grpc-port') + 1]}") as ch:
            call = stub(ch).Process()
            await call.write(request_headers())
            await call.write(request_body(BODY))
            assert destination(await call.read()) == (f"127.0.0.1:{port}", f"127.0.0.1:{port}")
            call.cancel()
    finally:
        await runner.cleanup()


async def test_build_app_takes_discovery_from_the_configuration(tmp_path: Path) -> None:
    """dataLayer.discovery (file-discovery) replaces the discovery flags; without a metrics source
    (injectDefaults: false) endpoints are ready when discovered."""
    from datalayer.discovery.file_plugin import FileDiscoveryPlugin

    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text('endpoints:\n  - {name: vllm-0, address: "10.0.0.1", port: "8000"}\n')
    config = (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        f"plugins:\n- type: file-discovery\n  parameters: {{path: {endpoints}}}\n- type: max-score-picker\n"
        "dataLayer:\n  injectDefaults: false\n  discovery:\n    pluginRef: file-discovery\n"
    )
    app = await build_app(parse_options(["--config-text", config, "--secure-serving=false"], env={}))
    assert isinstance(app.layer.discovery, FileDiscoveryPlugin)
    assert app.layer.sources == () and not app.layer.collects_metrics
    no_discovery = config.replace("  discovery:\n    pluginRef: file-discovery\n", "")
    with pytest.raises(StartupError, match="no endpoints"):
        await build_app(parse_options(["--config-text", no_discovery, "--secure-serving=false"], env={}))


PREDICTED_LATENCY = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
- type: latency-scorer
- type: max-score-picker
"""


async def test_build_app_reports_a_bad_latency_sidecar_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREDICTION_SERVER_URL", "http://localhost:8001")
    monkeypatch.setenv("LATENCY_MAX_BULK_SIZE", "500")
    options = parse_options(
        ["--endpoints", "127.0.0.1:8000", "--secure-serving=false", "--config-text", PREDICTED_LATENCY],
        env={},
    )
    with pytest.raises(StartupError, match=r"latency predictor sidecar: LATENCY_MAX_BULK_SIZE='500'"):
        await build_app(options)
