"""The standalone chart's pod, run for real: the rendered Envoy config and picker command line.

The chart is rendered with free ports (``envoy.port``, ``envoy.adminPort``, ``extProcPort``); the Envoy
sidecar runs the rendered ``envoy.yaml`` with the container's own arguments, and the picker runs the
container's arguments (TLS on, as in the pod) with two substitutions a machine without Kubernetes
needs: ``--endpoints`` instead of the pod-label discovery, and local paths for the ConfigMap files
(the health and metrics ports also move to free ports, bound to 127.0.0.1). Requests then go through
Envoy to fake model servers:

* routed by the picker (ext_proc over TLS, ORIGINAL_DST on ``x-gateway-destination-endpoint``), and a
  client-sent destination header is ignored;
* FailClose: with the picker stopped, Envoy answers 5xx;
* FailOpen: with the picker stopped, the request goes to ``envoy.fallbackService``;
* GIE's default values: GIE's own Envoy preset (its envoy.yaml and arguments) routes through the picker.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import yaml
from _deploy_helm import Renderer
from _deploy_manifests import by_kind
from _deploy_tools import ModelServer, free_port, model_server, stop
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
STANDALONE = ROOT / "deploy" / "helm" / "standalone"
BIN = Path(sys.executable).parent
LABELS = {"app": "vllm-llama3-8b-instruct"}
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@dataclass
class Pod:
    envoy_port: int
    picker: subprocess.Popen[bytes]
    logs: Path


def _serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def _envoy_ready(admin_port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{admin_port}/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _wait(predicate: Any, what: str, procs: list[subprocess.Popen[bytes]], logs: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        if predicate():
            return
        time.sleep(0.2)
    tails = "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in sorted(logs.glob("*.log")))
    raise AssertionError(f"{what} did not become ready\n{tails}")


def _local_args(args: list[str], files: Path, ports: dict[str, int], endpoint: str) -> list[str]:
    out = [f"--endpoints={endpoint}", "--host=127.0.0.1"]
    for arg in args:
        name, _, value = arg.partition("=")
        if name in ("--endpoint-selector", "--endpoint-target-ports"):
            continue
        if value.startswith("/config/"):
            arg = f"{name}={files / value.removeprefix('/config/')}"
        elif name == "--grpc-health-port":
            arg = f"{name}={ports['health']}"
        elif name == "--metrics-port":
            arg = f"{name}={ports['metrics']}"
        out.append(arg)
    return out


@contextmanager
def standalone_pod(
    render: Renderer, tmp: Path, values: dict[str, Any], endpoint: ModelServer
) -> Iterator[Pod]:
    ports = {name: free_port() for name in ("envoy", "admin", "grpc", "health", "metrics")}
    values = {
        **values,
        "inferencePool": {"modelServers": {"matchLabels": LABELS}},
        "inferenceExtension": {**values.get("inferenceExtension", {}), "extProcPort": ports["grpc"]},
        "envoy": {**values.get("envoy", {}), "port": ports["envoy"], "adminPort": ports["admin"]},
    }
    objects = render(STANDALONE, values, release="e2e")
    files = tmp / "config"
    files.mkdir()
    for config_map in by_kind(objects, "ConfigMap"):
        for name, text in config_map["data"].items():
            (files / name).write_text(text)
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    picker_args = _local_args(containers["epp"]["args"], files, ports, f"127.0.0.1:{endpoint.port}")
    envoy_args = list(containers["envoy"]["args"])
    envoy_args[envoy_args.index("--config-path") + 1] = str(files / "envoy.yaml")
    with ExitStack() as stack:
        picker_log = stack.enter_context((tmp / "picker.log").open("wb"))
        envoy_log = stack.enter_context((tmp / "envoy.log").open("wb"))
        out = subprocess.STDOUT
        picker = subprocess.Popen([str(BIN / "epp"), *picker_args], stdout=picker_log, stderr=out)
        stack.callback(stop, picker)
        envoy = subprocess.Popen([str(BIN / "envoy"), *envoy_args], stdout=envoy_log, stderr=out)
        stack.callback(stop, envoy)
        _wait(lambda: _serving(ports["health"]), "the picker", [picker, envoy], tmp)
        _wait(lambda: _envoy_ready(ports["admin"]), "Envoy", [picker, envoy], tmp)
        yield Pod(ports["envoy"], picker, tmp)


def complete(pod: Pod, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"model": "m", "prompt": "Hello there", "max_tokens": 5}
    url = f"http://127.0.0.1:{pod.envoy_port}/v1/completions"
    return httpx.post(url, json=body, headers=headers, timeout=20)


def test_fail_close_pod_routes_through_the_picker_and_fails_closed(render: Renderer, tmp_path: Path) -> None:
    with (
        model_server("picked") as picked,
        model_server("other") as other,
        standalone_pod(render, tmp_path, {}, picked) as pod,
    ):
        reply = complete(pod)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["text"] == "picked"
        # A client cannot choose the upstream: the header is removed before the picker runs.
        reply = complete(pod, {"x-gateway-destination-endpoint": f"127.0.0.1:{other.port}"})
        assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == "picked"
        assert (picked.completions, other.completions) == (2, 0)
        stop(pod.picker)
        reply = complete(pod)
        assert reply.status_code >= 500, reply.text
        assert picked.completions == 2


def test_fail_open_pod_falls_back_when_the_picker_is_down(render: Renderer, tmp_path: Path) -> None:
    with model_server("picked") as picked, model_server("fallback") as fallback:
        values = {
            "inferenceExtension": {"failureMode": "FailOpen"},
            "envoy": {"fallbackService": f"127.0.0.1:{fallback.port}"},
        }
        with standalone_pod(render, tmp_path, values, picked) as pod:
            reply = complete(pod)
            assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == "picked", reply.text
            stop(pod.picker)
            reply = complete(pod)
            assert reply.status_code == 200, reply.text
            assert reply.json()["choices"][0]["text"] == "fallback"
            assert (picked.completions, fallback.completions) == (1, 1)


GIE_DEFAULTS = Path(__file__).with_name("upstream") / "gie-standalone-values.yaml"
GIE_PORTS = {"envoy": 8081, "ready": 19001, "admin": 19000, "grpc": 9002}


def test_gie_envoy_preset_pod_routes_through_the_picker(render: Renderer, tmp_path: Path) -> None:
    """GIE's default values (its Envoy preset, selector mode): GIE's envoy.yaml with the preset's own
    arguments in front of the picker. Its fixed ports (8081, 19000, 19001, 9002) are moved to free ones."""
    ports = {name: free_port() for name in (*GIE_PORTS, "health", "metrics")}
    values = yaml.safe_load(GIE_DEFAULTS.read_text())
    values["inferencePool"]["modelServers"] = {"matchLabels": LABELS}
    values["inferenceExtension"]["endpointsServer"]["createInferencePool"] = False
    values["inferenceExtension"]["extProcPort"] = ports["grpc"]
    objects = render(STANDALONE, values, release="e2e")
    files = tmp_path / "config"
    files.mkdir()
    for config_map in by_kind(objects, "ConfigMap"):
        for name, text in config_map["data"].items():
            (files / name).write_text(text)
    envoy_yaml = (files / "envoy.yaml").read_text()
    for name, port in GIE_PORTS.items():
        assert f"port_value: {port}" in envoy_yaml, name
        envoy_yaml = envoy_yaml.replace(f"port_value: {port}", f"port_value: {ports[name]}")
    (files / "envoy.yaml").write_text(envoy_yaml.replace("localhost:9002", f"localhost:{ports['grpc']}"))
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    envoy_args = list(containers["envoy-sidecar"]["args"])
    envoy_args[envoy_args.index("-c") + 1] = str(files / "envoy.yaml")
    envoy_args[envoy_args.index("--log-level") + 1] = "info"
    with model_server("picked") as picked, ExitStack() as stack:
        picker_args = _local_args(containers["epp"]["args"], files, ports, f"127.0.0.1:{picked.port}")
        picker_log = stack.enter_context((tmp_path / "picker.log").open("wb"))
        envoy_log = stack.enter_context((tmp_path / "envoy.log").open("wb"))
        out = subprocess.STDOUT
        picker = subprocess.Popen([str(BIN / "epp"), *picker_args], stdout=picker_log, stderr=out)
        stack.callback(stop, picker)
        envoy = subprocess.Popen([str(BIN / "envoy"), *envoy_args], stdout=envoy_log, stderr=out)
        stack.callback(stop, envoy)
        _wait(lambda: _serving(ports["health"]), "the picker", [picker, envoy], tmp_path)

        def ready() -> bool:  # the preset's readiness probe: GET /ready on 19001
            try:
                return httpx.get(f"http://127.0.0.1:{ports['ready']}/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        _wait(ready, "Envoy", [picker, envoy], tmp_path)
        reply = complete(Pod(ports["envoy"], picker, tmp_path))
        assert reply.status_code == 200, reply.text + (tmp_path / "envoy.log").read_text()[-3000:]
        assert reply.json()["choices"][0]["text"] == "picked"
        assert picked.completions == 1
