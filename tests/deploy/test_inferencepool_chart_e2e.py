"""The inferencepool chart's picker, run for real against a fake Kubernetes API server.

The chart is rendered (1 replica, and 3 replicas with leader election) with the fake model server's
port as the pool's target port. The fake API server (``tests/fakekube``: real list/watch JSON) holds
the rendered InferencePool and one Ready pod at 127.0.0.1. The picker runs with the Deployment's own
arguments and the environment the pod gets (``NAMESPACE``, ``POD_NAME``; ``KUBECONFIG`` for the fake
server), changed only where a pod differs from a test machine: local paths for the ConfigMap files,
free health and metrics ports, binding 127.0.0.1. Then:

* the chart's readiness and liveness probe services report SERVING on the health port;
* with 3 replicas, the picker holds the pool's Lease (holder = its POD_NAME);
* an ext_proc exchange over TLS (the chart leaves ``--secure-serving`` on) returns the pod's
  ``127.0.0.1:<port>`` in ``x-gateway-destination-endpoint``;
* ``/metrics`` is open without the ServiceMonitor and requires the mounted token (here a local file in
  place of the service-account-token Secret) with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from _deploy_helm import NAMESPACE, Renderer
from _deploy_manifests import by_kind, one
from _deploy_tools import free_port, model_server
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import HttpBody, HttpHeaders, ProcessingRequest
from fakekube import objects as kube_objects
from fakekube import running_fake_kube
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
POOL = ROOT / "deploy" / "helm" / "inferencepool"
EPP = Path(sys.executable).with_name("epp")
OBJECTIVES = ("inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives", "InferenceObjective")
POD_NAME = "e2e-epp-5d8f9c7b6-x2x9q"
TOKEN = "metrics-reader-token"
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def until(condition: Callable[[], Any], what: str, proc: asyncio.subprocess.Process, log: Path) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline and proc.returncode is None:
        if await condition():
            return
        await asyncio.sleep(0.2)
    tail = (await asyncio.to_thread(log.read_text))[-4000:]
    raise AssertionError(f"{what}: not reached\n{tail}")


async def health(port: int, service: str) -> bool:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def pick(port: int) -> str:
    """One ext_proc exchange over TLS (the picker's self-signed certificate, fetched and trusted)."""
    pem = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", port))
    credentials = grpc.ssl_channel_credentials(root_certificates=pem.encode())
    options = [("grpc.ssl_target_name_override", "localhost")]
    body = json.dumps({"model": "m", "prompt": "Hello there"}).encode()
    headers = [(":method", "POST"), (":path", "/v1/completions"), ("content-type", "application/json")]
    messages = [
        ProcessingRequest(
            request_headers=HttpHeaders(
                headers=HeaderMap(headers=[HeaderValue(key=k, raw_value=v.encode()) for k, v in headers])
            )
        ),
        ProcessingRequest(request_body=HttpBody(body=body, end_of_stream=True)),
    ]
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials, options=options) as channel:
        call = ext_proc_grpc.ExternalProcessorStub(channel).Process(iter(messages), timeout=10)
        async for reply in call:
            if reply.HasField("request_headers"):
                mutation = reply.request_headers.response.header_mutation
                for header in mutation.set_headers:
                    if header.header.key == "x-gateway-destination-endpoint":
                        return header.header.raw_value.decode() or header.header.value
                raise AssertionError(f"no destination header in {reply}")
            if reply.HasField("immediate_response"):
                raise AssertionError(f"picker answered {reply.immediate_response}")
    raise AssertionError("the stream ended without a header response")


def local_args(args: list[str], files: Path, health_port: int, metrics_port: int) -> list[str]:
    out = ["--host=127.0.0.1"]
    for arg in args:
        name, _, value = arg.partition("=")
        if value.startswith("/config/"):
            arg = f"{name}={files / value.removeprefix('/config/')}"
        elif name == "--metrics-bearer-token-file":  # the mounted service-account token
            (files / "token").write_text(TOKEN)
            arg = f"{name}={files / 'token'}"
        elif name == "--grpc-health-port":
            arg = f"{name}={health_port}"
        elif name == "--metrics-port":
            arg = f"{name}={metrics_port}"
        out.append(arg)
    return out


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@asynccontextmanager
async def running_picker(
    rendered: list[dict[str, Any]], kube_url: str, tmp: Path, ports: dict[str, int]
) -> AsyncIterator[asyncio.subprocess.Process]:
    files = tmp / "config"
    files.mkdir()
    for name, text in one(rendered, "ConfigMap")["data"].items():
        (files / name).write_text(text)
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": kube_url}}],
                "users": [{"name": "fake", "user": {"token": "fake"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )
    )
    (epp,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    env_names = {e["name"] for e in epp["env"]}
    assert {"NAMESPACE", "POD_NAME"} <= env_names
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env |= {"KUBECONFIG": str(kubeconfig), "NAMESPACE": NAMESPACE, "POD_NAME": POD_NAME}
    args = local_args(epp["args"], files, ports["health"], ports["metrics"])
    with (tmp / "picker.log").open("wb") as log:
        proc = await asyncio.create_subprocess_exec(str(EPP), *args, env=env, stdout=log, stderr=log)
    try:
        yield proc
    finally:
        await _stop(proc)


@pytest.mark.parametrize(("replicas", "prometheus"), [(1, False), (3, False), (1, True)])
async def test_pool_chart_picker_serves_the_pool(
    replicas: int, prometheus: bool, render: Renderer, tmp_path: Path
) -> None:
    ports = {"grpc": free_port(), "health": free_port(), "metrics": free_port()}
    labels = {"app": "vllm-e2e"}
    monitoring = {"prometheus": {"enabled": prometheus}}
    with model_server("vllm-0") as server:
        values = {
            "inferenceExtension": {
                "replicas": replicas,
                "extProcPort": ports["grpc"],
                "monitoring": monitoring,
            },
            "inferencePool": {
                "modelServers": {"matchLabels": labels},
                "targetPorts": [{"number": server.port}],
            },
        }
        rendered = await asyncio.to_thread(render, POOL, values, "e2e")
        (epp,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
        async with running_fake_kube() as (kube, _):
            store = kube.store
            pool = one(rendered, "InferencePool")
            store.apply(store.register(*kube_objects.INFERENCE_POOLS), NAMESPACE, {**pool, "status": {}})
            store.apply(
                store.register(*kube_objects.CORE_PODS),
                NAMESPACE,
                kube_objects.pod("vllm-0", "127.0.0.1", labels),
            )
            leases = store.register(*kube_objects.LEASES)
            store.register(*OBJECTIVES)
            log = tmp_path / "picker.log"
            async with running_picker(rendered, kube.url, tmp_path, ports) as proc:
                for probe in ("readinessProbe", "livenessProbe"):
                    service = epp[probe]["grpc"]["service"]

                    async def serving(service: str = service) -> bool:
                        return await health(ports["health"], service)

                    await until(serving, f"{probe} service {service!r}", proc, log)
                if replicas > 1:
                    holders = [
                        lease["spec"].get("holderIdentity", "")
                        for lease in store.list(leases, NAMESPACE)["items"]
                    ]
                    assert len(holders) == 1 and holders[0].startswith(POD_NAME), holders
                assert await pick(ports["grpc"]) == f"127.0.0.1:{server.port}"
                metrics = f"http://127.0.0.1:{ports['metrics']}/metrics"
                async with httpx.AsyncClient(timeout=5) as client:
                    anonymous = await client.get(metrics)
                    authorised = await client.get(metrics, headers={"Authorization": f"Bearer {TOKEN}"})
                assert authorised.status_code == 200
                assert "inference_extension_info" in authorised.text
                # The chart protects /metrics exactly when its ServiceMonitor presents the token.
                assert anonymous.status_code == (401 if prometheus else 200)
                assert bool(by_kind(rendered, "ServiceMonitor")) == prometheus
