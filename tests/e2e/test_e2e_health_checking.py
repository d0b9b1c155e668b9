"""``--health-checking``: grpc.health.v1 on the ext_proc port, on both engines, with real clients.

Real processes: the picker (``--grpc-engine`` h2, the default, and grpcio), one simulated model server,
grpcio's health stub (``grpc_health.v1``) on the picker's ext_proc port, and the real Envoy health-checking
the picker cluster actively (``grpc_health_check``) while routing through it."""

from __future__ import annotations

import copy
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
import yaml
from e2e_lib import completion, eventually, running
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import HttpBody, HttpHeaders, ProcessingRequest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from devtools.envoy_config import envoy_binary, render
from devtools.stack import Stack, StackSpec, running_process
from epp.server.health import EXT_PROC_SERVICE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(params=["h2", "ngh2", "grpcio"])
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    spec = StackSpec(
        servers=1,
        sim_args=("--time-scale", "50"),
        envoy_variant=None,
        picker_args=("--health-checking", f"--grpc-engine={request.param}"),
    )
    with running(spec) as started:
        yield started


def _check(channel: grpc.Channel, service: str) -> int:
    reply = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=5
    )
    return int(reply.status)


def _ext_proc_answers(channel: grpc.Channel) -> str:
    """The first answer of a routed request (the stream stays open until it is read)."""
    headers = HeaderMap(
        headers=[
            HeaderValue(key=k, raw_value=v.encode())
            for k, v in {
                ":method": "POST",
                ":path": "/v1/completions",
                "content-type": "application/json",
            }.items()
        ]
    )
    body = b'{"model": "m", "prompt": "hi", "max_tokens": 4}'
    answered = threading.Event()

    def messages() -> Iterator[ProcessingRequest]:
        yield ProcessingRequest(request_headers=HttpHeaders(headers=headers))
        yield ProcessingRequest(request_body=HttpBody(body=body, end_of_stream=True))
        answered.wait(10)

    call = pb_grpc.ExternalProcessorStub(channel).Process(messages(), timeout=10)
    first = next(call)
    answered.set()
    call.cancel()
    return str(first.WhichOneof("response"))


def test_a_grpc_health_client_on_the_ext_proc_port(stack: Stack) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{stack.ports.grpc}") as channel:
        assert _check(channel, "") == SERVING
        assert _check(channel, EXT_PROC_SERVICE) == SERVING
        with pytest.raises(grpc.RpcError) as err:
            _check(channel, "inference-extension")  # known on the health port only
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        listed = health_pb2_grpc.HealthStub(channel).List(health_pb2.HealthListRequest(), timeout=5)
        assert {name: r.status for name, r in listed.statuses.items()} == {
            "": SERVING,
            EXT_PROC_SERVICE: SERVING,
        }
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=30
        )
        assert next(watch).status == SERVING
        assert _ext_proc_answers(channel) == "request_headers"  # ext_proc on the same connection meanwhile
        if "--grpc-engine=h2" not in stack.picker_argv():
            watch.cancel()
            return
        # h2: at SIGTERM the watch gets NOT_SERVING and ends UNAVAILABLE, without holding the 30 s grace
        assert stack.picker is not None and stack.picker.proc is not None
        started = time.monotonic()
        os.killpg(stack.picker.pid, signal.SIGTERM)
        assert next(watch).status == NOT_SERVING
        with pytest.raises(grpc.RpcError) as err:
            next(watch)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert err.value.details() == "the endpoint picker is shutting down"
        assert stack.picker.proc.wait(20) == 0
        assert time.monotonic() - started < 20


def _health_checked(config: dict[str, Any], service: str) -> dict[str, Any]:
    """The picker cluster's copy, named ``probe-<service>``, actively health-checked for ``service``."""
    clusters = config["static_resources"]["clusters"]
    picker = next(c for c in clusters if c["name"] == "endpoint_picker")
    probe = copy.deepcopy(picker) if service else picker
    probe["health_checks"] = [
        {
            "timeout": "1s",
            "interval": "0.2s",
            "no_traffic_interval": "0.2s",
            "unhealthy_threshold": 1,
            "healthy_threshold": 1,
            "grpc_health_check": {"service_name": service or EXT_PROC_SERVICE},
        }
    ]
    if service:
        probe["name"] = probe["load_assignment"]["cluster_name"] = f"probe-{service}"
        clusters.append(probe)
    return probe


def _host_flags(admin_url: str, cluster: str) -> str:
    text = httpx.get(f"{admin_url}/clusters", timeout=2).text
    return "".join(
        line for line in text.splitlines() if line.startswith(f"{cluster}::") and "health_flags" in line
    )


def test_envoy_health_checks_the_picker_on_its_ext_proc_port(stack: Stack) -> None:
    config = render("gie-fail-closed", stack.envoy_params())
    _health_checked(config, "")  # the ext_proc cluster itself: checked for the ext_proc service
    _health_checked(config, "no-such-service")  # a copy checked for a service the port does not know
    path = stack.workdir / "envoy-health-checked.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    argv = [str(envoy_binary()), "-c", str(path), "--concurrency", "1", "--log-level", "warn"]
    with running_process(
        "envoy-hc", [*argv, "--disable-hot-restart"], stack.workdir / "envoy-hc.log"
    ) as envoy:
        assert eventually(lambda: envoy.running() and _http_ok(f"{stack.admin_url}/ready"), 20), stack.logs()
        assert eventually(
            lambda: _host_flags(stack.admin_url, "endpoint_picker").endswith("::healthy"), 20
        ), _host_flags(stack.admin_url, "endpoint_picker")
        assert eventually(
            lambda: "failed_active_hc" in _host_flags(stack.admin_url, "probe-no-such-service"), 20
        )
        answer = completion(stack, "hi")  # routed: the checked picker cluster is in use
        assert answer.status_code == 200, answer.text
        assert _host_flags(stack.admin_url, "endpoint_picker").endswith("::healthy")


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
