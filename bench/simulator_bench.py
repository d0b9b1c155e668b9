"""Simulator benchmark: how much streaming one ``epp-sim`` process sustains on this machine.

Usage: ``epp-bench simulator [--servers 8] [--concurrency 64] [--seconds 10] [--max-tokens 64]
[--scenario realtime|max|both] [--json FILE]`` (also ``python -m bench.simulator_bench``).

One ``epp-sim`` subprocess serves ``--servers`` ports; this process runs a closed-loop async client
(aiohttp + uvloop) keeping ``--concurrency`` streaming ``/v1/completions`` requests in flight per
server (``ignore_eos``, ``--max-tokens`` tokens each) for ``--seconds`` after a 1 s warm-up.
Scenarios:

* ``realtime``: the 8b-h100 profile with ``--max-num-seqs`` = concurrency at ``--time-scale 1``. Every
  request runs at once, so the model's inter-token gap is ``12 ms x 2.0`` (full load factor). The
  simulator *keeps up* when the measured mean inter-token gap stays close to that (fidelity ~1.0).
* ``max``: zero latencies (TTFT 0, ITL 0): raw capacity of the process, requests/s and tokens/s.
* ``scrape``: ``--servers`` idle servers, each scraped on ``/metrics`` every 50 ms like the picker does;
  reports scrapes/s, scrape latency and the simulator's CPU per scrape.
* ``metrics``: time to render one ``/metrics`` body, ours vs ``prometheus_client.generate_latest`` on a
  registry holding the same families (no servers started).

Reported per scenario: requests/s, streamed tokens/s, client TTFT p50/p99, mean inter-token gap and
its p99 (per-request means), the model's gap, fidelity, errors, and CPU (cores) of the simulator and
of the client, from ``/proc/<pid>/stat`` and ``resource.getrusage`` (the two share the 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson

from devtools.stack import ManagedProcess, free_ports, running_process
from epp.config.flags import ManualHelpFormatter

__all__ = ["ScenarioResult", "main", "run_scenario", "run_scrape", "time_metrics_render"]

MODEL = "sim-bench"
_T = TypeVar("_T")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class _Stats:
    requests: int = 0
    tokens: int = 0
    errors: int = 0
    ttft: list[float] = field(default_factory=list)
    gap: list[float] = field(default_factory=list)  # per-request mean inter-token gap


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    scenario: str
    servers: int
    concurrency_per_server: int
    seconds: float
    requests_per_s: float
    tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_mean_ms: float
    itl_p99_ms: float
    model_itl_ms: float
    fidelity: float
    errors: int
    sim_cpu_cores: float
    client_cpu_cores: float


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def _simulator(ports: list[int], extra: list[str]) -> Iterator[ManagedProcess]:
    args = [sys.executable, "-m", "simulator", "--model", MODEL, "--ports", ",".join(map(str, ports)),
            "--log-level", "warning", *extra]  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="epp-sim-bench-") as tmp,
        running_process("epp-sim", args, Path(tmp) / "sim.log", stop_timeout_s=10.0) as proc,
    ):
        yield proc


async def _wait_up(session: aiohttp.ClientSession, urls: list[str], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    for url in urls:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url + "/health/ready") as r:
                    if r.status == 200:
                        break
            if time.monotonic() > deadline:
                raise TimeoutError(f"epp-sim at {url} not ready after {timeout}s")
            await asyncio.sleep(0.1)


async def _worker(
    session: aiohttp.ClientSession, url: str, body: bytes, window: tuple[float, float], stats: _Stats
) -> None:
    """Closed loop: one streaming request after another until the window ends; counts frames, not JSON.

    Tokens count when they arrive inside the window, requests when they complete inside it; latency
    figures come from requests that ran entirely inside it.
    """
    start, stop = window
    while time.monotonic() < stop:
        sent = time.monotonic()
        first = last = 0.0
        frames = 0
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                if resp.status != 200:
                    await resp.read()
                    stats.errors += start <= sent < stop
                    continue
                async for chunk in resp.content.iter_any():
                    n = chunk.count(b"data: {")
                    if n:
                        now = time.monotonic()
                        if not frames:
                            first = now
                        last = now
                        frames += n
                        stats.tokens += n if start <= now < stop else 0
        except (TimeoutError, aiohttp.ClientError):
            stats.errors += start <= sent < stop
            continue
        if not start <= last < stop:
            continue
        stats.requests += 1
        if sent >= start:
            stats.ttft.append(first - sent)
            if frames > 1:
                stats.gap.append((last - first) / (frames - 1))


async def _drive(urls: list[str], concurrency: int, seconds: float, max_tokens: int) -> _Stats:
    body = orjson.dumps({"model": MODEL, "prompt": "benchmark the simulator streaming path please",
                         "max_tokens": max_tokens, "ignore_eos": True, "stream": True})  # fmt: skip
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        await _wait_up(session, urls)
        stats = _Stats()
        start = time.monotonic()
        measure_from, stop_at = start + 1.0, start + 1.0 + seconds
        window = (measure_from, stop_at)
        tasks = [
            asyncio.create_task(_worker(session, u + "/v1/completions", body, window, stats))
            for u in urls
            for _ in range(concurrency)
        ]
        await asyncio.gather(*tasks)
        return stats


def run_scenario(
    scenario: str, servers: int, concurrency: int, seconds: float, max_tokens: int
) -> ScenarioResult:
    """Run one scenario against a fresh simulator process and return its figures."""
    if scenario == "realtime":
        extra = ["--profile", "8b-h100", "--max-num-seqs", str(concurrency), "--time-scale", "1"]
        model_itl = 0.012 * 2.0 if concurrency > 1 else 0.012
    elif scenario == "max":
        extra = ["--max-num-seqs", str(concurrency)]
        model_itl = 0.0
    else:
        raise ValueError(f"unknown scenario {scenario!r}; expected realtime or max")
    extra += ["--max-waiting-queue-length", str(4 * concurrency)]
    ports = free_ports(servers)
    with _simulator(ports, extra) as proc:
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        runner = _uvloop_run()
        sim_cpu0, cli_cpu0, wall0 = 0.0, 0.0, 0.0

        async def measured() -> _Stats:
            nonlocal sim_cpu0, cli_cpu0, wall0
            async with aiohttp.ClientSession() as s:
                await _wait_up(s, urls)
            sim_cpu0, cli_cpu0, wall0 = _proc_cpu(proc.pid), _self_cpu(), time.monotonic()
            return await _drive(urls, concurrency, seconds, max_tokens)

        stats = runner(measured())
        wall = time.monotonic() - wall0
        sim_cpu, cli_cpu = _proc_cpu(proc.pid) - sim_cpu0, _self_cpu() - cli_cpu0
    itl_mean = sum(stats.gap) / len(stats.gap) if stats.gap else float("nan")
    return ScenarioResult(
        scenario=scenario,
        servers=servers,
        concurrency_per_server=concurrency,
        seconds=seconds,
        requests_per_s=stats.requests / seconds,
        tokens_per_s=stats.tokens / seconds,
        ttft_p50_ms=_pct(stats.ttft, 0.5) * 1e3,
        ttft_p99_ms=_pct(stats.ttft, 0.99) * 1e3,
        itl_mean_ms=itl_mean * 1e3,
        itl_p99_ms=_pct(stats.gap, 0.99) * 1e3,
        model_itl_ms=model_itl * 1e3,
        fidelity=itl_mean / model_itl if model_itl else float("nan"),
        errors=stats.errors,
        sim_cpu_cores=sim_cpu / wall,
        client_cpu_cores=cli_cpu / wall,
    )


def _uvloop_run() -> Callable[[Coroutine[Any, Any, _T]], _T]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def run_scrape(servers: int, seconds: float, interval: float = 0.05) -> dict[str, float]:
    """Scrape every server's ``/metrics`` every ``interval`` s (as the picker does); simulator CPU cost."""
    ports = free_ports(servers)
    with _simulator(ports, []) as proc:
        urls = [f"http://127.0.0.1:{p}/metrics" for p in ports]
        latencies: list[float] = []

        async def scrape_loop(
            session: aiohttp.ClientSession, url: str, offset: float, start: float, stop: float
        ) -> None:
            next_at = time.monotonic() + offset  # servers are spread over the interval, as pollers drift
            await asyncio.sleep(offset)
            while next_at < stop:
                t0 = time.monotonic()
                async with session.get(url) as r:
                    await r.read()
                if t0 >= start:  # the first second opens the connections: not measured
                    latencies.append(time.monotonic() - t0)
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

        async def measured() -> tuple[float, float, float]:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                await _wait_up(session, [u.removesuffix("/metrics") for u in urls])
                begin = time.monotonic()
                start, stop = begin + 1.0, begin + 1.0 + seconds
                spread = interval / len(urls)
                loops = asyncio.gather(
                    *(scrape_loop(session, u, spread * i, start, stop) for i, u in enumerate(urls))
                )
                await asyncio.sleep(max(0.0, start - time.monotonic()))
                cpu0, cli0, wall0 = _proc_cpu(proc.pid), _self_cpu(), time.monotonic()
                await loops
                wall = time.monotonic() - wall0
                return (_proc_cpu(proc.pid) - cpu0) / wall, (_self_cpu() - cli0) / wall, wall

        sim_cores, client_cores, wall = _uvloop_run()(measured())
    rate = len(latencies) / wall
    return {"servers": servers, "interval_ms": interval * 1e3, "scrapes_per_s": rate,
            "latency_p50_ms": _pct(latencies, 0.5) * 1e3, "latency_p99_ms": _pct(latencies, 0.99) * 1e3,
            "sim_cpu_cores": sim_cores, "sim_us_per_scrape": sim_cores / rate * 1e6,
            "client_cpu_cores": client_cores}  # fmt: skip


def time_metrics_render(iterations: int = 2000) -> tuple[float, float]:
    """Seconds per ``/metrics`` body: our hand renderer vs prometheus_client with the same families."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    from simulator.config import SimConfig
    from simulator.engine import Engine
    from simulator.metrics import render_metrics
    from simulator.stats import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS

    engine = Engine(SimConfig(max_num_seqs=16, inter_token_latency=0.01))
    for i in range(100):
        seq = engine.submit(str(i), list(range(i, i + 50)), 10, 0.0)
        engine.schedule(0.0)
        engine.inter_token()
        engine.finish(seq, 1.0, "length", 10)
    t0 = time.perf_counter()
    for _ in range(iterations):
        render_metrics(engine)
    ours = (time.perf_counter() - t0) / iterations
    reg, m = CollectorRegistry(), ["model_name"]
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        Gauge(name, "h", m, registry=reg).labels("m").set(1)
    Gauge("vllm:cache_config_info", "h", [*m, "block_size", "num_gpu_blocks"], registry=reg).labels(
        "m", "16", "1024"
    ).set(1)
    labels = [*m, "max_lora", "running_lora_adapters", "waiting_lora_adapters"]
    Gauge("vllm:lora_requests_info", "h", labels, registry=reg).labels("m", "1", "", "").set(time.time())
    for name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens",
                 "vllm:generation_tokens"):  # fmt: skip
        Counter(name, "h", m, registry=reg).labels("m").inc(5)
    success = Counter("vllm:request_success", "h", [*m, "finish_reason"], registry=reg)
    for reason in ("stop", "length", "abort"):
        success.labels("m", reason).inc()
    for name, buckets in (("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
                          ("vllm:inter_token_latency_seconds", ITL_BUCKETS),
                          ("vllm:e2e_request_latency_seconds", E2E_BUCKETS),
                          ("vllm:request_queue_time_seconds", E2E_BUCKETS)):  # fmt: skip
        Histogram(name, "h", m, buckets=buckets, registry=reg).labels("m").observe(0.1)
    t0 = time.perf_counter()
    for _ in range(iterations):
        generate_latest(reg)
    return ours, (time.perf_counter() - t0) / iterations


def _table(results: Sequence[ScenarioResult]) -> str:
    head = ("| scenario | servers x conc | req/s | tokens/s | TTFT p50/p99 ms | ITL mean/p99 ms (model) "
            "| fidelity | errors | CPU sim/client |\n|---|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    rows = [
        f"| {r.scenario} | {r.servers} x {r.concurrency_per_server} | {r.requests_per_s:.0f} | "
        f"{r.tokens_per_s:.0f} | {r.ttft_p50_ms:.1f} / {r.ttft_p99_ms:.1f} | {r.itl_mean_ms:.1f} / "
        f"{r.itl_p99_ms:.1f} ({r.model_itl_ms:.0f}) | {r.fidelity:.2f} | {r.errors} | "
        f"{r.sim_cpu_cores:.2f} / {r.client_cpu_cores:.2f} |"
        for r in results
    ]
    return head + "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter, prog="epp-bench simulator", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--servers", type=int, default=8, help="simulated servers in the process (default 8)")
    p.add_argument("--concurrency", type=int, default=64, help="streams in flight per server (default 64)")
    p.add_argument("--seconds", type=float, default=10.0, help="measured window per scenario (default 10)")
    p.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (default 64)")
    p.add_argument("--scenario", choices=("realtime", "max", "both", "metrics", "scrape"), default="both",
                   help="realtime, max, both, metrics (render cost only) or scrape "
                        "(--servers servers scraped every 50 ms)")  # fmt: skip
    p.add_argument("--json", help="also write the results as JSON to this file")
    args = p.parse_args(argv)
    if args.servers < 1 or args.concurrency < 1 or args.seconds <= 0 or args.max_tokens < 2:
        p.error("--servers, --concurrency >= 1, --seconds > 0, --max-tokens >= 2")
    if args.scenario == "metrics":
        ours, theirs = time_metrics_render()
        print(f"/metrics body: hand renderer {ours * 1e6:.1f} us, prometheus_client {theirs * 1e6:.1f} us "
              f"({theirs / ours:.1f}x)")  # fmt: skip
        return 0
    if args.scenario == "scrape":
        figures = run_scrape(args.servers, args.seconds)
        print(" ".join(f"{k}={v:.3g}" for k, v in figures.items()))
        return 0
    scenarios = ("realtime", "max") if args.scenario == "both" else (args.scenario,)
    results = []
    for sc in scenarios:
        print(
            f"running {sc}: {args.servers} servers x {args.concurrency} streams, {args.seconds}s",
            file=sys.stderr,
        )
        results.append(run_scenario(sc, args.servers, args.concurrency, args.seconds, args.max_tokens))
    print(_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
