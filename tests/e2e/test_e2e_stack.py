"""The process harness itself: readiness, failure reports, port conflicts, stopping."""

from __future__ import annotations

import socket

import httpx
import pytest

from devtools.stack import Stack, StackError, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]


def test_a_port_taken_before_start_is_replaced_and_everything_stops() -> None:
    spec = StackSpec(servers=1, sim_args=("--time-scale", "50"), envoy_variant="round-robin", picker=False)
    stack = Stack(spec)
    taken = stack.ports.listen
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with stack:
            assert stack.ports.listen != taken
            r = httpx.post(f"{stack.base_url}/v1/completions", json={"model": "x", "prompt": "p"}, timeout=10)
            assert r.headers["x-inference-port"] == str(stack.ports.servers[0])
            procs = [p.proc for p in (*stack.servers, stack.envoy) if p is not None]
            assert stack.workdir.name.startswith("epp-stack-") and (stack.workdir / "sim-0.log").exists()
    assert all(p is not None and p.poll() is not None for p in procs)
    assert not stack.workdir.exists()  # its temporary folder goes with it


def test_a_process_that_cannot_start_raises_with_its_log() -> None:
    spec = StackSpec(servers=1, sim_args=("--no-such-flag",), picker=False, envoy_variant=None)
    with pytest.raises(StackError, match=r"sim-0: exited before it was ready(.|\n)*no-such-flag"):
        Stack(spec).start()
