"""Quick load loop for the ext_proc server (not a test): picker CPU per request, without Envoy.

Starts ``epp-sim`` (N simulated vLLM servers, for the scrapers) and the ``epp`` picker as subprocesses,
measures the picker's idle CPU (scraping) for 2 s, then drives ``--requests`` FULL_DUPLEX_STREAMED
requests (4 messages in, 4 out, like Envoy) over one HTTP/2 connection with ``--concurrency`` streams
in flight, and prints requests/s and the picker's CPU microseconds per request, idle scraping CPU
subtracted. Bounded in requests and time; kills what it starts.

    .venv/bin/python tests/epp/server/loop_bench.py --endpoints 16 --requests 4000 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import orjson
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode

sys.path.insert(0, os.path.dirname(__file__))
from srv_helpers import free_port, request_body, request_headers, response_body, response_headers, stub


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def request_only(ch: grpc.aio.Channel, body: bytes, usage: bytes) -> None:
    """BUFFERED request body, response phases skipped by the proxy: 2 messages in, 2 out."""
    call = stub(ch).Process()
    await call.write(request_headers(body_mode=ProcessingMode.BUFFERED))
    await call.read()
    await call.write(request_body(body))
    await call.read()
    await call.done_writing()
    await call.read()


CHUNKS = 1


async def one(ch: grpc.aio.Channel, body: bytes, usage: bytes) -> None:
    """FULL_DUPLEX_STREAMED with the response path, as GIE's Envoy config: 4 messages in, 4 out
    (plus one each per extra response chunk with ``--chunks``)."""
    call = stub(ch).Process()
    await call.write(request_headers())
    await call.write(request_body(body))
    await call.read()
    await call.read()
    await call.write(response_headers(200))
    await call.read()
    for _ in range(CHUNKS - 1):
        await call.write(response_body(b"data: {}\n\n", end_of_stream=False))
        await call.read()
    await call.write(response_body(usage))
    await call.read()
    await call.done_writing()
    await call.read()


async def drive(
    port: int, requests: int, concurrency: int, body: bytes, deadline: float, mode: str = "full"
) -> int:
    flow = one if mode == "full" else request_only
    usage = orjson.dumps({"usage": {"prompt_tokens": 250, "completion_tokens": 10, "total_tokens": 260}})
    done = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:

        async def worker() -> None:
            nonlocal done
            while done < requests and time.monotonic() < deadline:
                done += 1
                await flow(ch, body, usage)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


def scheduler_mean_us(metrics_port: int) -> float:
    """Mean of inference_extension_scheduler_e2e_duration_seconds, from the picker's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    values = {}
    for line in text.splitlines():
        for key in ("_sum", "_count"):
            if line.startswith(f"inference_extension_scheduler_e2e_duration_seconds{key} "):
                values[key] = float(line.split()[-1])
    return values["_sum"] / max(values["_count"], 1.0) * 1e6


async def wait_port(port: int) -> None:
    for _ in range(200):
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoints", type=int, default=16)
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--body-bytes", type=int, default=1000)
    p.add_argument("--max-seconds", type=float, default=60)
    p.add_argument("--mode", choices=("full", "request-only"), default="full")
    p.add_argument("--chunks", type=int, default=1, help="response body chunks per request (full mode)")
    p.add_argument("--epp-args", default="", help="extra epp flags, space separated")
    args = p.parse_args()
    global CHUNKS
    CHUNKS = max(1, args.chunks)
    bindir = os.path.dirname(sys.executable)
    ports = [free_port() for _ in range(args.endpoints)]
    sim = subprocess.Popen(
        [os.path.join(bindir, "epp-sim"), "--host", "127.0.0.1", "--ports", ",".join(map(str, ports)),
         "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    grpc_port, health, metrics = free_port(), free_port(), free_port()
    epp = subprocess.Popen(
        [os.path.join(bindir, "epp"), "--endpoints", ",".join(f"127.0.0.1:{q}" for q in ports), "--host",
         "127.0.0.1", "--grpc-port", str(grpc_port), "--grpc-health-port", str(health), "--metrics-port",
         str(metrics), "--secure-serving=false", *args.epp_args.split()],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        asyncio.run(wait_port(grpc_port))
        time.sleep(1.0)
        c0, t0 = cpu_seconds(epp.pid), time.monotonic()
        time.sleep(2.0)
        idle_rate = (cpu_seconds(epp.pid) - c0) / (time.monotonic() - t0)
        prompt = "x" * max(0, args.body_bytes - 40)
        body = orjson.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": prompt})
        asyncio.run(drive(grpc_port, 200, args.concurrency, body, time.monotonic() + 10))  # warm-up
        c0, t0 = cpu_seconds(epp.pid), time.monotonic()
        n = asyncio.run(
            drive(grpc_port, args.requests, args.concurrency, body, t0 + args.max_seconds, args.mode)
        )
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(epp.pid) - c0 - idle_rate * elapsed
        print(
            f"mode={args.mode} chunks={CHUNKS} endpoints={args.endpoints} body={len(body)}B "
            f"concurrency={args.concurrency} "
            f"requests={n} elapsed={elapsed:.2f}s rate={n / elapsed:.0f} req/s "
            f"idle_cpu={idle_rate * 100:.1f}% picker_cpu_per_request={cpu / n * 1e6:.0f}us "
            f"mean_schedule={scheduler_mean_us(metrics):.0f}us"
        )
    finally:
        for proc in (epp, sim):
            proc.send_signal(signal.SIGTERM)
        for proc in (epp, sim):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
