"""End to end: endpoints given by host name, through the real Envoy to real simulator processes.

The picker resolves names (a hosts file the test rewrites, or the system resolver for ``localhost``)
and writes ``ip:port`` destinations, which Envoy's ORIGINAL_DST cluster routes; when a name's mapping
changes, traffic follows. A name that does not resolve stops the process at start; a picker whose
endpoints never answered is not ready, and becomes ready once one does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from e2e_lib import MODEL, completion, decisions, eventually, running, served_by
from grpc_health.v1 import health_pb2, health_pb2_grpc

from datalayer.discovery import join_address
from devtools.envoy_config import EnvoyParams, envoy_binary, write_config
from devtools.stack import ManagedProcess, Stack, StackSpec, free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SIM_ARGS = ("--time-scale", "50")


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a distinct mtime on coarse clocks


def _port_of(response: httpx.Response) -> int | None:
    return served_by(response) if response.status_code == 200 else None


def _routed_to(stack: Stack, port: int, n: int = 4) -> None:
    for i in range(n):
        r = completion(stack, f"which server {port} {i}")
        assert r.status_code == 200, r.text
        assert served_by(r) == port
        assert decisions(stack)[r.request.headers["x-request-id"]] == [f"127.0.0.1:{port}"]


def test_names_route_through_envoy_and_traffic_follows_a_changed_mapping(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    # 127.0.0.2 is loopback too, but nothing listens there: the servers bind 127.0.0.1 only
    _write(hosts, "127.0.0.1 sim-a.test\n127.0.0.2 sim-b.test\n")
    spec = StackSpec(
        servers=2,
        sim_args=SIM_ARGS,
        picker_hosts=("sim-a.test", "sim-b.test"),
        picker_args=("--endpoints-hosts-file", str(hosts), "--endpoints-resolve-interval", "100ms"),
    )
    with running(spec) as stack:
        a, b = stack.ports.servers
        _routed_to(stack, a)  # sim-b.test's address does not answer: only sim-a.test's server is ready
        _write(hosts, "127.0.0.2 sim-a.test\n127.0.0.1 sim-b.test\n")
        assert eventually(lambda: _port_of(completion(stack, "moved?")) == b, timeout_s=20)
        _routed_to(stack, b)
        endpoints = httpx.get(f"{stack.metrics_url}/debug/endpoints", timeout=5).json()
        assert sorted((e["address"], e["name"]) for e in endpoints) == [
            (f"127.0.0.1:{b}", f"sim-b.test:{b}"),
            (f"127.0.0.2:{a}", f"sim-a.test:{a}"),
        ]
        log = (stack.workdir / "picker.log").read_text()
        assert "endpoint host name re-resolved" in log


def test_localhost_as_a_new_user_types_it_is_routed() -> None:
    """The issue's case: ``--endpoints localhost:PORT`` used to start and then 503 every request."""
    spec = StackSpec(servers=1, sim_args=SIM_ARGS, picker_hosts=("localhost",))
    with running(spec) as stack:
        _routed_to(stack, stack.ports.servers[0])


def _epp(*args: str) -> list[str]:
    grpc_port, health, metrics = free_ports(3)
    return [
        sys.executable, "-m", "epp", "--host", "127.0.0.1", "--secure-serving=false",
        "--grpc-port", str(grpc_port), "--grpc-health-port", str(health), "--metrics-port", str(metrics),
        *args,
    ]  # fmt: skip


def test_a_name_that_does_not_resolve_stops_the_picker_at_start(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    _write(hosts, "127.0.0.1 sim-a.test\n")
    argv = _epp("--endpoints", "sim-a.test:8000,sim-typo.invalid:8000", "--endpoints-hosts-file", str(hosts))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "epp: --endpoints: cannot resolve host name 'sim-typo.invalid'" in done.stderr


def _serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def test_not_ready_until_an_endpoint_answers_then_routed(tmp_path: Path) -> None:
    spec = StackSpec(servers=1, sim_args=SIM_ARGS, picker=False, envoy_variant=None)
    stack = Stack(spec, workdir=tmp_path)
    picker = ManagedProcess("picker", stack.picker_argv(), tmp_path / "picker.log")
    try:
        picker.start()
        stack.picker = picker  # stopped with the stack
        log = tmp_path / "picker.log"
        assert eventually(lambda: "not ready" in log.read_text(), timeout_s=20), log.read_text()
        assert picker.running() and not _serving(stack.ports.health)
        assert f"127.0.0.1:{stack.ports.servers[0]}" in log.read_text()  # the warning names it
        stack.start_servers()
        assert eventually(lambda: _serving(stack.ports.health), timeout_s=20), log.read_text()
        stack.start_envoy("gie-fail-closed")
        _routed_to(stack, stack.ports.servers[0])
    except BaseException as exc:
        exc.add_note(stack.logs())
        raise
    finally:
        stack.stop()


def test_envoy_routes_only_ip_destinations_and_ipv6_bracketed(tmp_path: Path) -> None:
    """Why names must be resolved, and that the IPv6 form the picker writes is the one Envoy parses.

    A scripted picker sets the destination; nothing listens at it (and nothing is bound on ::1), so a
    destination Envoy accepts ends in a connection attempt that fails, and one it cannot parse in
    ORIGINAL_DST's ``no healthy upstream``, the issue's symptom.
    """
    dead, picker_port, listen, admin = free_ports(4)
    params = EnvoyParams(
        listen_port=listen, admin_port=admin, picker_port=picker_port, picker_tls=False,
        endpoints=(f"127.0.0.1:{dead}",),
    )  # fmt: skip
    config = write_config("gie-fail-closed", params, tmp_path / "envoy.yaml")
    envoy_argv = [str(envoy_binary()), "-c", str(config), "--disable-hot-restart", "--log-level", "warn"]
    script = str(Path(__file__).with_name("scripted_picker.py"))
    cases = {
        join_address("::1", dead): "remote connection failure",  # [::1]:port: parsed, connection tried
        join_address("127.0.0.1", dead): "remote connection failure",
        f"localhost:{dead}": "no healthy upstream",  # a name: what --endpoints used to pass through
        f"::1:{dead}": "no healthy upstream",  # IPv6 without brackets
    }
    envoy = ManagedProcess("envoy", envoy_argv, tmp_path / "envoy.log")
    url = f"http://127.0.0.1:{listen}/v1/completions"
    try:
        envoy.start()
        assert eventually(lambda: _ok(f"http://127.0.0.1:{admin}/ready"), timeout_s=20), envoy.log.read_text()
        for i, (destination, outcome) in enumerate(cases.items()):
            argv = [sys.executable, script, "--port", str(picker_port), "--destination", destination]
            picks = tmp_path / f"picks-{i}.log"
            picker = ManagedProcess("scripted-picker", [*argv, "--log", str(picks)], tmp_path / "picker.log")
            picker.start()
            try:
                replies: list[httpx.Response] = []

                def routed(replies: list[httpx.Response] = replies, picks: Path = picks) -> bool:
                    replies.append(httpx.post(url, json={"model": MODEL, "prompt": "where?"}, timeout=10.0))
                    return picks.exists()  # the scripted picker routed it (not Envoy's 500 while it starts)

                assert eventually(routed, timeout_s=20), picker.log.read_text()
                assert replies[-1].status_code == 503 and outcome in replies[-1].text, (
                    destination,
                    replies[-1].text,
                )
            finally:
                picker.stop()
    finally:
        envoy.stop()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
