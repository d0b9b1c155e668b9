"""End to end: vllm-router (Rust, from PyPI) in front of three epp-sim servers in one process.

vllm-router needs /health, /get_load, /v1/completions/render and /v1/chat/completions/render from its
workers; this checks its round_robin, cache_aware and power_of_two policies route through the simulator.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.stack import free_ports, running_process

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
ROUTER = BIN / "vllm-router"
MODEL = "sim-model"


def wait_until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if check():  # type: ignore[operator]
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} not up after {timeout}s")


@pytest.fixture(scope="module")
def sim_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    ports = free_ports(3)
    log = tmp_path_factory.mktemp("sim") / "epp-sim.log"
    args = [sys.executable, "-m", "simulator", "--model", MODEL, "--ports", ",".join(map(str, ports)),
            "--profile", "8b-h100", "--time-scale", "20", "--block-size", "4"]  # fmt: skip
    with running_process("epp-sim", args, log) as proc:
        for port in ports:
            health = f"http://127.0.0.1:{port}/health"
            wait_until(lambda u=health: httpx.get(u).status_code == 200, 15, "epp-sim")
        assert proc.running(), log.read_text()
        yield ports


@contextlib.contextmanager
def router(policy: str, sim_ports: list[int], tmp: Path) -> Iterator[str]:
    port, prom = free_ports(2)
    workers = [f"http://127.0.0.1:{p}" for p in sim_ports]
    args = [str(ROUTER), "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom),
            "--worker-urls", *workers]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with running_process("vllm-router", args, tmp / f"router-{policy}.log") as proc:
        probe = {"model": MODEL, "prompt": "probe", "max_tokens": 1}
        endpoint = url + "/v1/completions"
        wait_until(lambda: httpx.post(endpoint, json=probe).status_code == 200, 20, "vllm-router")
        assert proc.running()
        yield url


def complete(url: str, prompt: str, stream: bool = False) -> httpx.Response:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 3, "ignore_eos": True, "stream": stream}
    resp = httpx.post(url + "/v1/completions", json=body, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp


@pytest.mark.skipif(not ROUTER.exists(), reason="vllm-router is not installed")
def test_round_robin_spreads_over_all_servers(sim_ports: list[int], tmp_path: Path) -> None:
    with router("round_robin", sim_ports, tmp_path) as url:
        ports = [complete(url, f"question {i}").headers["x-inference-port"] for i in range(9)]
    hits = collections.Counter(ports)
    assert set(hits) == {str(p) for p in sim_ports}
    assert max(hits.values()) - min(hits.values()) <= 1


@pytest.mark.skipif(not ROUTER.exists(), reason="vllm-router is not installed")
def test_cache_aware_sends_a_shared_prefix_to_the_server_that_caches_it(
    sim_ports: list[int], tmp_path: Path
) -> None:
    system = " ".join(f"policy{i}" for i in range(200))
    with router("cache_aware", sim_ports, tmp_path) as url:
        first = complete(url, system + " first question")
        again = [complete(url, system + f" follow up {i}") for i in range(4)]
    port = first.headers["x-inference-port"]
    assert all(r.headers["x-inference-port"] == port for r in again)
    assert all(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= 200 for r in again)


@pytest.mark.skipif(not ROUTER.exists(), reason="vllm-router is not installed")
def test_power_of_two_routes_streams(sim_ports: list[int], tmp_path: Path) -> None:
    with router("power_of_two", sim_ports, tmp_path) as url:
        for i in range(4):
            resp = complete(url, f"stream {i}", stream=True)
            assert resp.text.endswith("data: [DONE]\n\n")
            assert resp.headers["x-inference-port"] in {str(p) for p in sim_ports}
