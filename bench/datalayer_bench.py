"""Data-layer benchmark: scraper CPU share and snapshot age at the 50 ms refresh interval.

Usage: ``epp-bench datalayer [--endpoints 64,256] [--seconds 10] [--interval 0.05] [--client aiohttp]``.

A subprocess serves ``N`` simulated vLLM ``/metrics`` + ``/v1/models`` endpoints (aiohttp, one port
each, realistic ~30 KB bodies whose gauges change every request). This process runs only the data
layer (static discovery, the real HTTP client) and, after a warm-up, measures for ``--seconds``:

* **CPU share**: (user + system CPU of this process, from ``resource.getrusage``) / wall time, i.e. the
  fraction of one core the scraper uses (target <= 0.25 at 64 endpoints);
* **snapshot age**: every 10 ms, for every endpoint in ``snapshot()``, ``now - metrics.updated_at``;
  reported as p50 / p99 / max (target p99 <= 100 ms);
* the scrape rate achieved and the number of endpoints that were not ready at the end.

It also times the parsers on one body: our ``datalayer.promtext`` (all samples and the filtered fast
path) against ``prometheus_client.parser``, and the HTTP client's response parsing (``httptools``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import random
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, cast

import structlog

from epp.config.flags import ManualHelpFormatter

__all__ = [
    "PointResult",
    "http_parse_timings",
    "main",
    "parser_timings",
    "run_point",
    "serve_fleet",
    "vllm_metrics_text",
]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_BUCKETS_LONG = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)
_BUCKETS_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", _BUCKETS_S),
    ("vllm:inter_token_latency_seconds", _BUCKETS_S),
    ("vllm:time_per_output_token_seconds", _BUCKETS_S),
    ("vllm:e2e_request_latency_seconds", _BUCKETS_LONG),
    ("vllm:request_queue_time_seconds", _BUCKETS_LONG),
    ("vllm:request_inference_time_seconds", _BUCKETS_LONG),
    ("vllm:request_prefill_time_seconds", _BUCKETS_LONG),
    ("vllm:request_decode_time_seconds", _BUCKETS_LONG),
    ("vllm:request_prompt_tokens", _BUCKETS_TOKENS),
    ("vllm:request_generation_tokens", _BUCKETS_TOKENS),
    ("vllm:iteration_tokens_total", _BUCKETS_TOKENS),
    ("vllm:request_max_num_generation_tokens", _BUCKETS_TOKENS),
    ("vllm:request_params_max_tokens", _BUCKETS_TOKENS),
)


def vllm_metrics_text(waiting: int = 0, running: int = 0, kv: float = 0.0, seed: int = 0) -> str:
    """A /metrics body shaped like vLLM 0.10's (process + vllm families, 13 histograms, ~30 KB)."""
    rng = random.Random(seed)
    m = f'engine="0",model_name="{MODEL}"'
    out = [f'python_gc_objects_collected_total{{generation="{g}"}} {rng.randint(0, 9)}.0' for g in range(3)]
    out.append("# HELP process_resident_memory_bytes Resident memory size in bytes.")
    out.append("# TYPE process_resident_memory_bytes gauge")
    out.append(f"process_resident_memory_bytes {rng.randint(10**9, 10**10)}.0")
    out.append(f"process_cpu_seconds_total {rng.random() * 1e4:.2f}")
    gauges = (
        ("vllm:num_requests_running", float(running)),
        ("vllm:num_requests_waiting", float(waiting)),
        ("vllm:kv_cache_usage_perc", kv),
    )
    for name, value in gauges:
        out += [f"# HELP {name} gauge of the engine.", f"# TYPE {name} gauge", f"{name}{{{m}}} {value!r}"]
    out.append("# TYPE vllm:lora_requests_info gauge")
    out.append(
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora",waiting_lora_adapters=""} '
        f"{1.7e9 + seed}"
    )
    out.append("# TYPE vllm:cache_config_info gauge")
    out.append(
        f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",enable_prefix_caching="True",{m},'
        'gpu_memory_utilization="0.9",num_cpu_blocks="2048",num_gpu_blocks="16384",swap_space="4"} 1.0'
    )
    for name in ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens", "generation_tokens"):
        out += [f"# TYPE vllm:{name}_total counter", f"vllm:{name}_total{{{m}}} {rng.randint(0, 10**8)}.0"]
    for reason in ("stop", "length", "abort"):
        out.append(f'vllm:request_success_total{{finished_reason="{reason}",{m}}} {rng.randint(0, 10**5)}.0')
    for name, bounds in _HISTOGRAMS:
        out.append(f"# HELP {name} Histogram of {name}.")
        out.append(f"# TYPE {name} histogram")
        count = 0
        for bound in bounds:
            count += rng.randint(0, 500)
            out.append(f'{name}_bucket{{{m},le="{float(bound)!r}"}} {count}.0')
        out.append(f'{name}_bucket{{{m},le="+Inf"}} {count}.0')
        out.append(f"{name}_count{{{m}}} {count}.0")
        out.append(f"{name}_sum{{{m}}} {rng.random() * count:.4f}")
    return "\n".join(out) + "\n"


# -- the simulated fleet (runs in a subprocess) -------------------------------------------------------

_MODELS_BODY = (
    b'{"object":"list","data":[{"id":"' + MODEL.encode() + b'","object":"model","owned_by":"vllm",'
    b'"root":"' + MODEL.encode() + b'","parent":null,"max_model_len":8192},'
    b'{"id":"sql-lora","object":"model","owned_by":"vllm","root":"/adapters/sql","parent":"'
    + MODEL.encode()
    + b'"}]}'
)


def _response(body: bytes, content_type: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type + b"\r\nContent-Length: "
    return head + str(len(body)).encode() + b"\r\n\r\n" + body


class _FleetProtocol(asyncio.Protocol):
    """A minimal keep-alive HTTP/1.1 server for GETs: /metrics rotates pre-rendered bodies."""

    def __init__(self, metrics: Sequence[bytes], models: bytes, offset: int) -> None:
        self._metrics = metrics
        self._models = models
        self._i = offset
        self._buf = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while (end := self._buf.find(b"\r\n\r\n")) >= 0:
            head, self._buf = self._buf[:end], self._buf[end + 4 :]
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
            assert self._transport is not None
            if path == b"/metrics":
                self._i = (self._i + 1) % len(self._metrics)
                self._transport.write(self._metrics[self._i])
            elif path == b"/v1/models":
                self._transport.write(self._models)
            else:
                self._transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


async def serve_fleet(count: int, variants: int = 16) -> None:
    """Serve ``count`` endpoints on free ports of 127.0.0.1; print their ports as one JSON line."""
    loop = asyncio.get_running_loop()
    ctype = b"text/plain; version=0.0.4; charset=utf-8"
    bodies = [
        _response(vllm_metrics_text(i % 7, 4 + i % 5, (i % 10) / 10, seed=i).encode(), ctype)
        for i in range(variants)
    ]
    models = _response(_MODELS_BODY, b"application/json")
    servers = [
        await loop.create_server(partial(_FleetProtocol, bodies, models, i), "127.0.0.1", 0)
        for i in range(count)
    ]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    print(json.dumps(ports), flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not os.read(sys.stdin.fileno(), 1) else None)
    await stop.wait()


# -- the measurement -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PointResult:
    endpoints: int
    interval_ms: float
    client: str
    seconds: float
    cpu_share: float  # of one core, scraper process, sampler excluded
    scrapes_per_s: float
    cpu_us_per_scrape: float
    age_p50_ms: float
    age_p99_ms: float
    age_max_ms: float
    not_ready_at_end: int


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Counting:
    """Counts the GETs of the wrapped client (scrapes of all sources)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    async def get(self, url: str, *, timeout: float, max_bytes: int) -> Any:
        self.calls += 1
        return await self.inner.get(url, timeout=timeout, max_bytes=max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run_point(
    ports: Sequence[int], interval: float, seconds: float, client: str, warmup: float = 1.0
) -> PointResult:
    """Scrape ``ports`` with a real DataLayer and measure CPU share and snapshot age."""
    from bench.httpx_client import HttpxClient
    from datalayer import AiohttpClient, DataLayer, DataLayerOptions, StaticDiscovery
    from datalayer.http.rawhttp import RawHttpClient

    clients = {"aiohttp": AiohttpClient, "httpx": HttpxClient, "raw": RawHttpClient}
    http = _Counting(clients[client]())
    layer = DataLayer(
        StaticDiscovery.from_addresses([f"127.0.0.1:{p}" for p in ports]),
        http=http,
        options=DataLayerOptions(refresh_interval=interval),
    )
    await layer.start()
    try:
        await asyncio.sleep(warmup)
        ages: list[float] = []
        sampler_cpu = 0.0
        calls0, cpu0, t0 = http.calls, _cpu(), time.monotonic()
        while (now := time.monotonic()) - t0 < seconds:
            s0 = time.process_time()
            for record in layer.snapshot():
                updated = record.metrics.updated_at
                ages.append(now - updated if updated else math.inf)
            sampler_cpu += time.process_time() - s0
            await asyncio.sleep(0.01)
        cpu1, t1 = _cpu(), time.monotonic()
        scrapes = http.calls - calls0
        not_ready = sum(1 for r in layer.snapshot() if not r.ready)
    finally:
        await layer.stop()
        await http.aclose()
    wall = t1 - t0
    cpu = max(0.0, cpu1 - cpu0 - sampler_cpu)
    return PointResult(
        endpoints=len(ports),
        interval_ms=interval * 1000,
        client=client,
        seconds=round(wall, 2),
        cpu_share=round(cpu / wall, 3),
        scrapes_per_s=round(scrapes / wall, 1),
        cpu_us_per_scrape=round(cpu / max(scrapes, 1) * 1e6, 1),
        age_p50_ms=round(_quantile(ages, 0.5) * 1000, 1),
        age_p99_ms=round(_quantile(ages, 0.99) * 1000, 1),
        age_max_ms=round(max(ages) * 1000, 1) if ages else math.nan,
        not_ready_at_end=not_ready,
    )


def parser_timings(repeat: int = 200) -> dict[str, float]:
    """Microseconds to parse one realistic body: ours (all / filtered) vs prometheus_client."""
    import timeit

    from prometheus_client.parser import text_string_to_metric_families

    from datalayer.engines import BUILTIN_ENGINES
    from datalayer.promtext import parse_exposition

    text = vllm_metrics_text(3, 5, 0.4, seed=1)
    wanted = BUILTIN_ENGINES["vllm"].wanted_names()
    cases = {
        "prometheus_client.parser": lambda: list(text_string_to_metric_families(text)),
        "promtext (all samples)": lambda: parse_exposition(text),
        "promtext (5 wanted names)": lambda: parse_exposition(text, wanted),
    }
    return {name: round(timeit.timeit(fn, number=repeat) / repeat * 1e6, 1) for name, fn in cases.items()}


def http_parse_timings(repeat: int = 2000) -> dict[str, float]:
    """Microseconds of CPU for :class:`~datalayer.http.rawhttp.RawHttpClient`'s connection protocol to parse
    one ~30 KB ``/metrics`` response (fed in 16 KiB reads, no sockets): Content-Length and chunked."""
    from datalayer.http.rawhttp import _Conn

    body = vllm_metrics_text(3, 5, 0.4, seed=1).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
    sized = head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    chunked = head + b"Transfer-Encoding: chunked\r\n\r\n"
    for i in range(0, len(body), 8192):
        chunked += b"%x\r\n" % len(body[i : i + 8192]) + body[i : i + 8192] + b"\r\n"
    chunked += b"0\r\n\r\n"

    class _Sink:
        def write(self, data: bytes) -> None: ...

        def abort(self) -> None: ...

    async def measure(reply: bytes) -> float:
        conn = _Conn()
        conn.connection_made(_Sink())  # type: ignore[arg-type]
        reads = [reply[i : i + 16384] for i in range(0, len(reply), 16384)]
        start = time.process_time()
        for _ in range(repeat):
            done = conn.request(b"GET /metrics HTTP/1.1\r\n\r\n", 1 << 20)
            for data in reads:
                conn.data_received(data)
            assert len(done.result().body) == len(body)
        return round((time.process_time() - start) / repeat * 1e6, 1)

    cases = {"Content-Length": sized, "chunked (8 KiB chunks)": chunked}
    return {name: asyncio.run(measure(reply)) for name, reply in cases.items()}


def _start_fleet(count: int) -> tuple[subprocess.Popen[bytes], list[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.datalayer_bench", "serve", str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise RuntimeError("the fleet subprocess did not start")
    return proc, json.loads(line)


def _stop_fleet(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _run_loop(coro: Any, loop: str) -> Any:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter, prog="epp-bench datalayer", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--endpoints", default="64,256", help="comma-separated fleet sizes")
    p.add_argument("--seconds", type=float, default=10.0, help="measurement time per point, seconds")
    p.add_argument("--interval", type=float, default=0.05, help="refresh interval, seconds")
    p.add_argument(
        "--client", default="raw", help="HTTP clients to compare, comma-separated: raw, aiohttp, httpx"
    )
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="event loop")
    p.add_argument("--json", action="store_true", help="print one JSON object per point")
    args = p.parse_args(list(argv) if argv is not None else None)
    sizes = [int(n) for n in args.endpoints.split(",") if n.strip()]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if not args.json:
        print("parser, us per ~30 KB vLLM body:", parser_timings())
        print("HTTP response parse (RawHttpClient), us CPU per ~30 KB response:", http_parse_timings())
    for size in sizes:
        for client in args.client.split(","):
            proc, ports = _start_fleet(size)
            try:
                result = _run_loop(run_point(ports, args.interval, args.seconds, client), args.loop)
            finally:
                _stop_fleet(proc)
            if args.json:
                print(json.dumps(asdict(result)))
                continue
            print(
                f"{size:4d} endpoints @ {result.interval_ms:.0f} ms ({client}, {args.loop}): "
                f"CPU {result.cpu_share * 100:5.1f}% of a core, {result.scrapes_per_s:7.1f} scrapes/s, "
                f"{result.cpu_us_per_scrape:6.1f} us CPU/scrape, snapshot age p50 {result.age_p50_ms} ms "
                f"p99 {result.age_p99_ms} ms max {result.age_max_ms} ms, not ready {result.not_ready_at_end}"
            )
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        _run_loop(serve_fleet(int(sys.argv[2])), "uvloop")
    else:
        raise SystemExit(main())
