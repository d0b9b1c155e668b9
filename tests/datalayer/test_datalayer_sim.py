"""Integration: the data layer scraping real ``epp-sim`` servers that hang, die and come back.

Two simulator processes; B is frozen (SIGSTOP: its metrics stop arriving and the endpoint must go
STALE within the staleness threshold, before the 1 s request timeout), thawed (healthy again), killed
(connection refused: UNHEALTHY at once) and restarted on the same port (healthy again). A stays
healthy and fresh throughout.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from datalayer import (
    DataLayer,
    DataLayerOptions,
    EndpointRecord,
    Health,
    StaticDiscovery,
    default_http_client,
)

pytestmark = pytest.mark.e2e

SIM = Path(sys.executable).with_name("epp-sim")
THRESHOLD = 0.6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(port: int) -> subprocess.Popen[bytes]:
    # 10 ms per output token: a 300-token request runs for about 3 s, long enough to be scraped.
    return subprocess.Popen(
        [str(SIM), "--port", str(port), "--inter-token-latency", "10ms", "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"epp-sim did not listen on {port}")


@pytest.fixture
def sims() -> Iterator[dict[str, tuple[int, list[subprocess.Popen[bytes]]]]]:
    if not SIM.exists():
        pytest.skip("epp-sim is not installed in this virtualenv")
    procs: dict[str, tuple[int, list[subprocess.Popen[bytes]]]] = {}
    try:
        for name in ("a", "b"):
            port = _free_port()
            procs[name] = (port, [_start(port)])
        for port, _ in procs.values():
            _wait_listening(port)
        yield procs
    finally:
        for _, started in procs.values():
            for proc in started:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.kill()
                proc.wait(timeout=10)


async def _until(
    layer: DataLayer, address: str, ok: Callable[[EndpointRecord], bool], timeout: float
) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        record = layer.get(address)
        if record is not None and ok(record):
            return time.monotonic() - start
        await asyncio.sleep(0.01)
    raise AssertionError(f"{address}: condition not met within {timeout}s: {layer.get(address)}")


async def test_stale_dead_and_restarted_servers(
    sims: dict[str, tuple[int, list[subprocess.Popen[bytes]]]],
) -> None:
    a, b = (f"127.0.0.1:{sims[n][0]}" for n in ("a", "b"))
    http = default_http_client()
    layer = DataLayer(
        StaticDiscovery.from_addresses([a, b]),
        http=http,
        options=DataLayerOptions(refresh_interval=0.05, staleness_threshold=THRESHOLD, timeout=1.0),
    )
    healthy = lambda r: r.ready and r.health is Health.HEALTHY  # noqa: E731
    await layer.start()
    try:
        await _until(layer, a, healthy, 10)
        await _until(layer, b, healthy, 10)
        record = layer.get(b)
        assert record is not None and record.metrics.block_size and record.metrics.num_gpu_blocks
        # /v1/models is polled every 5 s: a first poll during the simulator's start-up may have failed
        model = "meta-llama/Llama-3.1-8B-Instruct"
        await _until(layer, b, lambda r: model in r.attributes.get("models", ()), 12)

        # Load on A shows up in its scraped metrics within a few polls.
        async with aiohttp.ClientSession() as session:
            body = {
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "prompt": "hello " * 50,
                "max_tokens": 300,
                "ignore_eos": True,
            }
            url = f"http://{a}/v1/completions"
            requests = [asyncio.create_task(session.post(url, json=body)) for _ in range(3)]
            await _until(
                layer, a, lambda r: r.metrics.running_requests + r.metrics.waiting_queue_size >= 3, 5
            )
            await _until(layer, a, lambda r: r.metrics.kv_cache_usage > 0, 5)
            for task in requests:
                task.cancel()
            await asyncio.gather(*requests, return_exceptions=True)

        proc_b = sims["b"][1][-1]
        os.kill(proc_b.pid, signal.SIGSTOP)  # hangs: no answers, connections stay open
        frozen_at = time.monotonic()
        await _until(layer, b, lambda r: not r.ready, THRESHOLD + 0.5)
        stale = layer.get(b)
        assert stale is not None and stale.health is Health.STALE
        assert time.monotonic() - frozen_at <= THRESHOLD + 0.5
        await _until(layer, b, lambda r: r.health is Health.UNHEALTHY, 3)  # then the 1 s timeout hits
        assert "timed out" in (layer.get(b).last_error or "")  # type: ignore[union-attr]
        os.kill(proc_b.pid, signal.SIGCONT)
        await _until(layer, b, healthy, 5)

        proc_b.kill()
        proc_b.wait(timeout=10)
        took = await _until(layer, b, lambda r: not r.ready, THRESHOLD)
        assert took <= THRESHOLD
        assert layer.get(b).health is Health.UNHEALTHY  # type: ignore[union-attr]

        sims["b"][1].append(_start(sims["b"][0]))
        await _until(layer, b, healthy, 20)

        record_a = layer.get(a)
        assert record_a is not None and record_a.ready
        assert record_a.age(layer.now()) < THRESHOLD
        assert layer.aggregates().ready_endpoints == 2
    finally:
        await layer.stop()
        await http.aclose()
