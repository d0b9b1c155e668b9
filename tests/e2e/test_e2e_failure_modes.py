"""End to end: the shipped Envoy variants, the picker going down (fail-open / fail-closed), TLS, retries.

One plaintext stack (two simulated servers) is shared; each test (re)starts Envoy with the variant it
needs and leaves the picker running when it ends. TLS and the scripted retry test start their own.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2e_lib import MODEL, completion, decisions, eventually, running, served_by

from devtools.envoy_config import EnvoyParams, envoy_binary, write_config
from devtools.stack import ManagedProcess, Stack, StackSpec, free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SPEC = StackSpec(servers=2, sim_args=("--time-scale", "50"), envoy_variant=None)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running(SPEC) as s:
        yield s


@pytest.fixture
def picker_up(stack: Stack) -> Iterator[Stack]:
    if stack.picker is None or not stack.picker.running():
        stack.start_picker()
    yield stack
    if stack.picker is None or not stack.picker.running():
        stack.start_picker()


def _routed_as_decided(stack: Stack, n: int = 4) -> None:
    for i in range(n):
        rid = f"{stack.envoy and stack.envoy.name}-{i}"
        r = completion(stack, f"variant check {i} " * 10, request_id=rid)
        assert r.status_code == 200, r.text
        assert decisions(stack)[r.request.headers["x-request-id"]][0] == f"127.0.0.1:{served_by(r)}"


def test_fail_closed_answers_500_while_the_picker_is_down(picker_up: Stack) -> None:
    stack = picker_up
    stack.start_envoy("gie-fail-closed")
    _routed_as_decided(stack)
    stack.stop_picker()
    r = completion(stack, "picker is down")
    assert r.status_code == 500
    assert "x-inference-port" not in r.headers


@pytest.mark.parametrize("variant", ["gie-fail-open", "override-host"])
def test_fail_open_keeps_traffic_flowing_while_the_picker_is_down(picker_up: Stack, variant: str) -> None:
    stack = picker_up
    stack.start_envoy(variant)
    _routed_as_decided(stack)  # picker up: BUFFERED request body, routed by the picker
    stack.stop_picker()
    ports = set()
    for i in range(6):
        r = completion(stack, f"picker is down {i}")
        assert r.status_code == 200, r.text
        ports.add(served_by(r))
    assert ports == set(stack.ports.servers)  # round-robin fallback over all model servers
    # a client cannot choose the upstream itself while the picker is down
    r = completion(stack, "sneaky", headers={"x-gateway-destination-endpoint": "127.0.0.1:1"})
    assert r.status_code == 200
    stack.start_picker()
    assert eventually(lambda: completion(stack, "back").status_code == 200)
    _routed_as_decided(stack)


def _stream(stack: Stack) -> list[str]:
    body = {"model": MODEL, "prompt": "hi " * 10, "max_tokens": 16, "ignore_eos": True, "stream": True}
    body["stream_options"] = {"include_usage": True}
    with httpx.stream("POST", f"{stack.base_url}/v1/completions", json=body, timeout=30.0) as r:
        assert r.status_code == 200
        return [line[6:] for line in r.iter_lines() if line.startswith("data: ")]


@pytest.mark.parametrize("variant", ["override-host", "no-response-body", "observability"])
def test_variant_routes_as_decided_and_streams(picker_up: Stack, variant: str) -> None:
    stack = picker_up
    stack.start_envoy(variant)
    _routed_as_decided(stack)
    frames = _stream(stack)
    assert frames[-1] == "[DONE]"
    assert json.loads(frames[-2])["usage"]["completion_tokens"] == 16


def test_picker_behind_tls() -> None:
    spec = StackSpec(servers=2, sim_args=("--time-scale", "50"), picker_tls=True)
    with running(spec) as stack:
        _routed_as_decided(stack)


def test_override_host_retries_down_the_pickers_list(tmp_path: Path) -> None:
    """The picker (scripted here) puts a stopped server first: Envoy retries on the next address."""
    spec = StackSpec(servers=2, sim_args=("--time-scale", "50"), picker=False, envoy_variant=None)
    with running(spec) as stack:
        dead, picker_port, listen, admin = free_ports(4)
        destination = f"127.0.0.1:{dead},{stack.endpoints[1]}"
        picks = tmp_path / "picks.log"
        script = Path(__file__).with_name("scripted_picker.py")
        argv = [stack.python, str(script), "--port", str(picker_port), "--destination", destination]
        picker = ManagedProcess("scripted-picker", [*argv, "--log", str(picks)], tmp_path / "picker.log")
        params = EnvoyParams(
            listen_port=listen,
            admin_port=admin,
            picker_port=picker_port,
            picker_tls=False,
            endpoints=(*stack.endpoints, f"127.0.0.1:{dead}"),
        )
        config = write_config("override-host", params, tmp_path / "envoy.yaml")
        envoy = ManagedProcess(
            "envoy", [str(envoy_binary()), "-c", str(config), "--disable-hot-restart"], tmp_path / "envoy.log"
        )
        try:
            picker.start()
            envoy.start()
            url = f"http://127.0.0.1:{listen}"
            # Envoy's /ready says nothing of its ext_proc cluster: wait for the scripted picker's port too,
            # or a first request that finds it still starting is answered 500 (fail closed).
            assert eventually(lambda: _listening(picker_port), timeout_s=20), picker.log.read_text()
            ready = eventually(lambda: _ok(f"http://127.0.0.1:{admin}/ready"), timeout_s=20)
            assert ready, envoy.log.read_text()
            body = {"model": MODEL, "prompt": "retry me", "max_tokens": 3}
            for _ in range(3):
                r = httpx.post(f"{url}/v1/completions", json=body, timeout=20.0)
                assert r.status_code == 200, (r.text, picker.log.read_text())
                assert served_by(r) == stack.ports.servers[1]
            stats = httpx.get(f"http://127.0.0.1:{admin}/stats", params={"filter": "model_servers"}).text
            assert "cluster.model_servers.upstream_rq_retry_success: 3" in stats
            assert picks.read_text().splitlines() == [destination] * 3
        finally:
            envoy.stop()
            picker.stop()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except OSError:
        return False
    return True


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
