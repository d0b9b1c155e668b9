"""Health status transitions, TLS (self-signed, cert dir, reload), /metrics and the debug endpoints."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import aiohttp
import grpc
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry
from srv_helpers import (
    BODY_JSON,
    FakeScheduler,
    StaticSource,
    make_server,
    request_body,
    request_headers,
    stub,
)

from epp.server.metrics import SchedulerMetrics, register_info
from epp.server.pool_metrics import PoolCollector
from epp.server.tls import CertDir, TlsError, load_certificate, self_signed, server_credentials

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
EXT_PROC = "envoy.service.ext_proc.v3.ExternalProcessor"


async def _status(port: int, service: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service))
        return int(resp.status)


async def test_health_transitions_follow_gie() -> None:
    srv = make_server()
    await srv.start()
    try:
        port = srv.grpc_health_port
        # Without leader election every service name is answered alike (GIE's chart probes
        # "inference-extension"): NOT_SERVING until the endpoints are synced.
        names = ("", "liveness", "readiness", "inference-extension", EXT_PROC)
        for service in names:
            assert await _status(port, service) == NOT_SERVING
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service=""))
            assert (await watch.read()).status == NOT_SERVING
            await srv.set_synced(True)
            assert (await asyncio.wait_for(watch.read(), 5)).status == SERVING
            for service in names:
                assert await _status(port, service) == SERVING
            listed = await health_pb2_grpc.HealthStub(ch).List(health_pb2.HealthListRequest())
            assert dict(listed.statuses)[EXT_PROC].status == SERVING
            await srv.health.shutting_down()
            assert (await asyncio.wait_for(watch.read(), 5)).status == NOT_SERVING
            watch.cancel()
        for service in names:
            assert await _status(port, service) == NOT_SERVING
    finally:
        await srv.shutdown(grace=0)


@pytest.mark.parametrize("engine", ["grpcio", "h2", "ngh2"])
async def test_leader_election_gates_readiness(engine: str) -> None:
    srv = make_server(leader_election=True, health_on_ext_proc_port=True, engine=engine)
    await srv.start()
    try:
        await srv.set_synced(True)
        assert await _status(srv.grpc_health_port, "readiness") == NOT_SERVING
        assert await _status(srv.grpc_health_port, "liveness") == SERVING
        assert await _status(srv.grpc_health_port, "no-such-service") == UNKNOWN
        await srv.set_leader(True)
        assert await _status(srv.grpc_health_port, "readiness") == SERVING
        assert await _status(srv.grpc_port, "") == SERVING  # --health-checking: also on the ext_proc port
        assert await _status(srv.grpc_port, EXT_PROC) == SERVING
        with pytest.raises(grpc.aio.AioRpcError) as err:  # the ext_proc port knows "" and ext_proc only
            await _status(srv.grpc_port, "liveness")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        await srv.set_leader(False)
        assert await _status(srv.grpc_health_port, "") == NOT_SERVING
        assert await _status(srv.grpc_health_port, "liveness") == SERVING
    finally:
        await srv.shutdown(grace=0)


async def _route_over_tls(port: int, root_pem: bytes) -> str:
    creds = grpc.ssl_channel_credentials(root_certificates=root_pem)
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds) as ch:
        call = stub(ch).Process()
        await call.write(request_headers())
        await call.write(request_body(BODY_JSON))
        resp = await call.read()
        call.cancel()
        return str(resp.WhichOneof("response"))


async def test_self_signed_tls_serves_clients_that_trust_it() -> None:
    creds, pair = server_credentials(cert_path=None, reload=False)
    srv = make_server(credentials=creds, certificate=pair)
    await srv.start()
    try:
        assert await _route_over_tls(srv.grpc_port, pair.cert_pem) == "request_headers"
        other = self_signed()
        with pytest.raises(grpc.aio.AioRpcError):
            await asyncio.wait_for(_route_over_tls(srv.grpc_port, other.cert_pem), 5)
    finally:
        await srv.shutdown(grace=0)


def _write_pair(directory: Path) -> bytes:
    pair = self_signed()
    tmp = directory / "tmp"
    tmp.mkdir(exist_ok=True)
    (tmp / "tls.crt").write_bytes(pair.cert_pem)
    (tmp / "tls.key").write_bytes(pair.key_pem)
    for name in ("tls.key", "tls.crt"):
        os.replace(tmp / name, directory / name)
    shutil.rmtree(tmp)
    return pair.cert_pem


async def test_cert_dir_reload_is_picked_up_by_new_connections(tmp_path: Path) -> None:
    first = _write_pair(tmp_path)
    creds, pair = server_credentials(cert_path=str(tmp_path), reload=True)
    assert pair.cert_pem == first
    srv = make_server(credentials=creds, certificate=pair)
    await srv.start()
    try:
        assert await _route_over_tls(srv.grpc_port, first) == "request_headers"
        second = _write_pair(tmp_path)
        os.utime(tmp_path / "tls.crt", ns=(1, 1))  # a different stamp even within one mtime tick
        assert await _route_over_tls(srv.grpc_port, second) == "request_headers"
        with pytest.raises(grpc.aio.AioRpcError):
            await asyncio.wait_for(_route_over_tls(srv.grpc_port, first), 5)
    finally:
        await srv.shutdown(grace=0)


def test_cert_dir_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(TlsError, match=r"tls\.crt"):
        CertDir(str(tmp_path)).load()
    (tmp_path / "tls.crt").write_bytes(self_signed().cert_pem)
    (tmp_path / "tls.key").write_bytes(self_signed().key_pem)
    with pytest.raises(TlsError, match="does not match"):
        CertDir(str(tmp_path)).load()
    (tmp_path / "tls.crt").write_bytes(b"garbage")
    with pytest.raises(TlsError, match="not a PEM certificate"):
        CertDir(str(tmp_path)).load()


async def test_metrics_and_debug_endpoints() -> None:
    registry = CollectorRegistry()
    sched_metrics = SchedulerMetrics(registry)
    register_info(registry, "abc123", "v0.1.0")
    source = StaticSource()
    registry.register(PoolCollector("pool-a", source.snapshot, saturation=lambda eps: 0.25))
    srv = make_server(FakeScheduler(), source=source, registry=registry, metrics_token="s3cret")
    await srv.start()
    sched_metrics.observe_cycle(0.0002, "ok")
    sched_metrics.observe_plugin("score", "queue-scorer", "queue-scorer", 1e-5)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{srv.grpc_port}") as ch:
            call = stub(ch).Process()
            await call.write(request_headers({"x-request-id": "dbg"}))
            await call.write(request_body(BODY_JSON))
            await call.read()
            call.cancel()
        base = f"http://127.0.0.1:{srv.metrics_port}"
        auth = {"Authorization": "Bearer s3cret"}
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/metrics") as r:
                assert r.status == 401
            async with http.get(base + "/metrics", headers={"Authorization": "Bearer nope"}) as r:
                assert r.status == 401
            async with http.get(base + "/metrics", headers=auth) as r:
                assert r.status == 200
                text = await r.text()
            async with http.get(base + "/debug/endpoints", headers=auth) as r:
                endpoints = orjson.loads(await r.read())
            async with http.get(base + "/debug/decisions?n=5", headers=auth) as r:
                decisions = orjson.loads(await r.read())
            async with http.get(base + "/debug/decisions?n=x", headers=auth) as r:
                assert r.status == 400
            async with http.get(base + "/debug/config", headers=auth) as r:
                assert orjson.loads(await r.read()) == {"flags": {"grpc_port": 0}}
    finally:
        await srv.shutdown(grace=0)
    for name in (
        "inference_objective_request_total", "inference_objective_request_error_total",
        "inference_objective_request_duration_seconds", "inference_objective_request_sizes",
        "inference_objective_response_sizes", "inference_objective_input_tokens",
        "inference_objective_output_tokens", "inference_objective_prompt_cached_tokens",
        "inference_objective_running_requests",
        "inference_objective_normalized_time_per_output_token_seconds",
        "inference_pool_average_kv_cache_utilization", "inference_pool_average_queue_size",
        "inference_pool_average_running_requests", "inference_pool_ready_pods",
        "inference_pool_per_pod_queue_size", "inference_extension_scheduler_e2e_duration_seconds",
        "inference_extension_scheduler_attempts_total", "inference_extension_plugin_duration_seconds",
        "inference_extension_prefix_indexer_size", "inference_extension_prefix_indexer_hit_ratio",
        "inference_extension_info", "inference_extension_flow_control_queue_size",
        "inference_extension_flow_control_queue_bytes",
        "inference_extension_flow_control_request_queue_duration_seconds",
        "inference_extension_flow_control_pool_saturation",
    ):  # fmt: skip
        assert f"# TYPE {name} " in text, name
    assert 'inference_pool_ready_pods{name="pool-a"} 3.0' in text
    assert (
        'inference_objective_request_total{model_name="m1",priority="0",target_model_name="m1"} 1.0' in text
    )
    attempts = [
        ln for ln in text.splitlines() if ln.startswith("inference_extension_scheduler_attempts_total{")
    ]
    assert len(attempts) == 1 and 'status="success"' in attempts[0] and 'port="8000"' in attempts[0]
    assert attempts[0].endswith(" 1.0") and 'target_model_name="m1"' in attempts[0]
    saturation = 'flow_control_pool_saturation{inference_pool="pool-a",stage="effective"} 0.25'
    assert "inference_extension_" + saturation in text and "llm_d_epp_" + saturation in text
    assert 'inference_extension_scheduler_e2e_duration_seconds_bucket{le="0.0001"}' in text
    assert [e["address"] for e in endpoints] == ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
    assert endpoints[0]["metrics"]["waiting_queue_size"] == 0
    assert decisions[0]["request_id"] == "dbg" and decisions[0]["endpoints"] == ["10.0.0.1:8000"]


async def test_h2_engine_tls_and_cert_reload(tmp_path: Path) -> None:
    first = _write_pair(tmp_path)
    pair, source = load_certificate(cert_path=str(tmp_path), reload=True)
    srv = make_server(engine="h2", certificate=pair, reload_from=source)
    await srv.start()
    try:
        assert await _route_over_tls(srv.grpc_port, first) == "request_headers"
        second = _write_pair(tmp_path)
        os.utime(tmp_path / "tls.crt", ns=(1, 1))
        for _ in range(100):  # the reload task checks every second
            try:
                if await asyncio.wait_for(_route_over_tls(srv.grpc_port, second), 5) == "request_headers":
                    break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the new certificate was never served")
        with pytest.raises(grpc.aio.AioRpcError):
            await asyncio.wait_for(_route_over_tls(srv.grpc_port, first), 5)
    finally:
        await srv.shutdown(grace=0)
