"""``epp-bench soak``: the picker behind the real Envoy for a long time at ~80% of its maximum throughput.

One stack (:mod:`devtools.stack`): ``--servers`` simulated servers in one process (TTFT 0, ITL ``--itl``), the
picker (plaintext, default configuration, ``--picker-args`` added) and Envoy (one worker) with the
``gie-fail-closed`` configuration, so every request and every streamed chunk crosses the picker.
Every request is a 1 KB completion streamed back as SSE with ``--tokens`` tokens.

1. **Probe** (``--probe-seconds``): a closed loop of ``--probe-concurrency`` connections; its req/s is
   the maximum throughput of this machine (the load generator included: it shares the cores).
2. **Soak** (``--minutes``): an open loop issuing ``--load`` × that rate (in-flight requests capped at
   ``--max-in-flight``; a request that would exceed the cap is not sent and counted as ``shed``), sampled
   every ``--window`` seconds: completed requests, errors (a status other than 200, a transport error,
   or a stream without its final ``data: [DONE]``), latency p50/p99, the picker's CPU per request (its
   utime+stime delta minus its idle rate, measured first with no traffic, over the window), its RSS
   (``VmRSS``) at the end of the window, and the most requests in flight at once during it (a backlog
   holds picker memory: read RSS growth next to it).

Targets, printed as PASS or MISS and written with the windows to ``report.md``: 0 errors; RSS growth
≤ 5% (the largest RSS of the windows after ``--warmup`` over the RSS at the end of the warm-up); CPU per
request flat: the median of the last ``n`` windows at most 10% above the median of the first ``n`` after
the warm-up (``n`` = a tenth of those windows, at least 3, at most half). Requests not sent because
``--max-in-flight`` were in flight are reported (a NOTE: the machine fell behind the offered rate).
Exit status 1 when a request failed.
``--quick`` (what ``epp-bench all`` runs): 3 s probe, 2 minutes, 10 s windows, 30 s warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp

from bench.extproc_bench import _body, bench_stack, picker_cpu_seconds
from devtools.stack import Stack
from epp.config.flags import ManualHelpFormatter
from simulator.workloads import percentile

__all__ = ["Window", "main", "rss_bytes", "verdicts"]

RSS_GROWTH_TARGET = 0.05
CPU_DRIFT_TARGET = 0.10


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (``VmRSS`` of /proc/<pid>/status) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass(frozen=True, slots=True)
class Window:
    end_s: float  # seconds since the soak started
    requests: int
    errors: int
    shed: int
    rps: float
    p50_ms: float
    p99_ms: float
    picker_us_per_req: float
    rss_mb: float
    in_flight: int = 0  # most requests in flight at once during the window (a backlog holds picker memory)


@dataclass(slots=True)
class _Tally:
    """One window's outcomes; requests record into ``_Counts.window`` when they end."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    shed: int = 0
    peak_in_flight: int = 0


@dataclass(slots=True)
class _Counts:
    window: _Tally = field(default_factory=_Tally)
    first_error: str = ""


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, counts: _Counts) -> None:
    start = time.perf_counter()
    try:
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
            data = await r.read()
            ok = r.status == 200 and data.rstrip().endswith(b"data: [DONE]")
            why = f"status {r.status}: {data[:200]!r}" if r.status != 200 else "stream without [DONE]"
    except (TimeoutError, aiohttp.ClientError) as exc:
        ok, why = False, repr(exc)
    if ok:
        counts.window.latencies.append((time.perf_counter() - start) * 1000)
    else:
        counts.window.errors += 1
        counts.first_error = counts.first_error or why


async def probe(url: str, body: bytes, concurrency: int, seconds: float) -> tuple[float, int]:
    """Closed loop: (req/s, errors) of ``concurrency`` connections sending back to back."""
    counts = _Counts()
    deadline = time.perf_counter() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.perf_counter() < deadline:
            await _one(session, url, body, counts)

    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return len(counts.window.latencies) / (time.perf_counter() - start), counts.window.errors


async def soak(
    stack: Stack, body: bytes, rate: float, args: argparse.Namespace, idle: float
) -> tuple[list[Window], str]:
    """Open loop at ``rate`` req/s for ``args.minutes``, one :class:`Window` per ``args.window`` s."""
    assert stack.picker is not None
    pid, url = stack.picker.pid, f"{stack.base_url}/v1/completions"
    counts, windows = _Counts(), list[Window]()
    in_flight: set[asyncio.Task[None]] = set()
    count = max(1, round(args.minutes * 60 / args.window))
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        start = last = time.perf_counter()
        cpu_last, sent, next_sample = picker_cpu_seconds(pid), 0, start + args.window
        while len(windows) < count:
            now = time.perf_counter()
            due = int((now - start) * rate) - sent
            for _ in range(max(0, due)):
                sent += 1
                if len(in_flight) >= args.max_in_flight:
                    counts.window.shed += 1
                    continue
                task = asyncio.create_task(_one(session, url, body, counts))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                counts.window.peak_in_flight = max(counts.window.peak_in_flight, len(in_flight))
            if now >= next_sample:
                cpu, tally = picker_cpu_seconds(pid), counts.window
                n, elapsed = len(tally.latencies), now - last
                used = max(0.0, cpu - cpu_last - idle * elapsed)
                windows.append(
                    Window(
                        end_s=now - start,
                        requests=n,
                        errors=tally.errors,
                        shed=tally.shed,
                        rps=n / elapsed,
                        p50_ms=percentile(tally.latencies, 50),
                        p99_ms=percentile(tally.latencies, 99),
                        picker_us_per_req=used / max(n, 1) * 1e6,
                        rss_mb=rss_bytes(pid) / 2**20,
                        in_flight=tally.peak_in_flight,
                    )
                )
                _print_window(windows[-1])
                counts.window = _Tally()
                last, cpu_last, next_sample = now, cpu, next_sample + args.window
            await asyncio.sleep(0.002)
        if in_flight:
            await asyncio.wait(in_flight, timeout=60)
    # requests that ended after the last window: their failures still count
    if counts.window.errors and windows:
        w = windows[-1]
        windows[-1] = Window(**{**asdict(w), "errors": w.errors + counts.window.errors})
    return windows, counts.first_error


def _print_window(w: Window) -> None:
    print(
        f"[soak] t={w.end_s:6.0f}s {w.rps:7.1f} req/s p50 {w.p50_ms:7.2f} ms p99 {w.p99_ms:7.2f} ms "
        f"picker {w.picker_us_per_req:6.0f} us/req RSS {w.rss_mb:6.1f} MB errors {w.errors} shed {w.shed} "
        f"peak in flight {w.in_flight}",
        flush=True,
    )


def verdicts(windows: Sequence[Window], warm_windows: int) -> list[str]:
    """PASS/MISS lines: errors; RSS growth and CPU per request drift over the windows after the first
    ``warm_windows`` (the warm-up); plus a note of requests not sent."""
    errors, shed = sum(w.errors for w in windows), sum(w.shed for w in windows)
    sent = sum(w.requests for w in windows) + errors
    out = [f"{'PASS' if errors == 0 else 'MISS'} errors: {errors} of {sent} requests (target 0)"]
    warm, after = windows[:warm_windows], windows[warm_windows:]
    if not warm or len(after) < 2:
        return [*out, "MISS too few windows to judge RSS and CPU (raise --minutes or lower --warmup)"]
    base, peak = warm[-1].rss_mb, max(w.rss_mb for w in after)
    growth = peak / base - 1
    out.append(
        f"{'PASS' if growth <= RSS_GROWTH_TARGET else 'MISS'} picker RSS growth after warm-up: "
        f"{growth * 100:+.1f}% ({base:.1f} MB at {warm[-1].end_s:.0f} s, peak {peak:.1f} MB, "
        f"last {after[-1].rss_mb:.1f} MB) (target ≤ {RSS_GROWTH_TARGET * 100:.0f}%)"
    )
    n = min(max(3, len(after) // 10), len(after) // 2)
    first = statistics.median(w.picker_us_per_req for w in after[:n])
    last = statistics.median(w.picker_us_per_req for w in after[-n:])
    drift = last / first - 1 if first > 0 else math.inf
    out.append(
        f"{'PASS' if drift <= CPU_DRIFT_TARGET else 'MISS'} picker CPU per request flat: median of the "
        f"first {n} windows after warm-up {first:.0f} µs, of the last {n} {last:.0f} µs "
        f"({drift * 100:+.1f}%) "
        f"(target: no growth above {CPU_DRIFT_TARGET * 100:.0f}%)"
    )
    if shed:
        out.append(
            f"NOTE {shed} requests were not sent: --max-in-flight requests were already in flight (the "
            "machine fell behind the offered rate for a while; see the p99 of those windows)"
        )
    return out


def report(windows: Sequence[Window], checks: Sequence[str], header: Sequence[str]) -> str:
    lines = [
        *header,
        "",
        "| t (s) | req/s | errors | shed | max in flight | p50 ms | p99 ms | picker µs/req | picker RSS MB |",
    ]
    lines.append("|---|---|---|---|---|---|---|---|---|")
    lines.extend(
        f"| {w.end_s:.0f} | {w.rps:.1f} | {w.errors} | {w.shed} | {w.in_flight} "
        f"| {w.p50_ms:.2f} | {w.p99_ms:.2f} | {w.picker_us_per_req:.0f} | {w.rss_mb:.1f} |"
        for w in windows
    )
    return "\n".join([*lines, "", *(f"- {c}" for c in checks), ""])


def run(args: argparse.Namespace) -> tuple[list[Window], list[str], list[str], str]:
    body = _body("1k", "stream", args.tokens)
    started = bench_stack(
        servers=args.servers,
        itl=args.itl,
        picker_args=args.picker_args,
        envoy_variant="gie-fail-closed",
        tag="soak",
    )
    with started as (stack, idle):
        url = f"{stack.base_url}/v1/completions"
        peak, probe_errors = asyncio.run(probe(url, body, args.probe_concurrency, args.probe_seconds))
        rate = args.load * peak
        header = [
            f"epp-bench soak: {args.minutes:g} min at {args.load:.0%} of the probed maximum, streamed "
            f"responses ({args.tokens} tokens, ITL {args.itl}), {args.servers} simulated servers, "
            f"Envoy gie-fail-closed, picker args {args.picker_args!r}",
            "",
            f"- probe: {peak:.1f} req/s with {args.probe_concurrency} connections for "
            f"{args.probe_seconds:g} s ({probe_errors} errors); soak rate {rate:.1f} req/s",
            f"- picker idle CPU (metrics polling): {idle * 1000:.0f} ms/s, subtracted from each window",
            f"- warm-up: {args.warmup:g} s; windows of {args.window:g} s",
        ]
        print("\n".join(header[2:]), flush=True)
        windows, first_error = asyncio.run(soak(stack, body, rate, args, idle))
    checks = verdicts(windows, round(args.warmup / args.window))
    if probe_errors:
        checks.insert(0, f"MISS errors during the probe: {probe_errors} (target 0)")
    return windows, checks, header, first_error


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter, prog="epp-bench soak", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="3 s probe, 2 minutes, 10 s windows, 30 s warm-up")
    p.add_argument("--minutes", type=float, default=30.0, help="soak duration (default 30)")
    p.add_argument("--window", type=float, default=60.0, help="sampling window in seconds (default 60)")
    p.add_argument("--warmup", type=float, default=120.0, help="seconds before RSS/CPU are judged")
    p.add_argument("--load", type=float, default=0.8, help="fraction of the probed maximum (default 0.8)")
    p.add_argument(
        "--probe-seconds", type=float, default=10.0, help="length of the throughput probe, seconds"
    )
    p.add_argument("--probe-concurrency", type=int, default=32, help="connections of the throughput probe")
    p.add_argument("--max-in-flight", type=int, default=512, help="open-loop cap on in-flight requests")
    p.add_argument("--servers", type=int, default=8, help="simulated servers (one epp-sim process)")
    p.add_argument("--tokens", type=int, default=32, help="streamed output tokens per request (default 32)")
    p.add_argument("--itl", default="200us", help="simulated inter-token latency (default 200us)")
    p.add_argument("--picker-args", default="", help="extra picker flags, e.g. '--grpc-engine=grpcio'")
    p.add_argument("--out", type=Path, default=None, help="output folder (default bench/results/<date>/soak)")
    args = p.parse_args(argv)
    if args.quick:
        args.minutes, args.window, args.warmup, args.probe_seconds = 2.0, 10.0, 30.0, 3.0
    if not 0 < args.load <= 1:
        p.error("--load: expected a fraction in (0, 1]")
    if args.window <= 0 or args.warmup < args.window or args.minutes * 60 < args.warmup + 2 * args.window:
        p.error("--window must be positive, --warmup at least one window, --minutes warm-up + 2 windows")
    windows, checks, header, first_error = run(args)
    if args.out is None:
        day = dt.datetime.now(dt.UTC).date().isoformat()
        args.out = Path(__file__).resolve().parents[1] / "bench" / "results" / day / "soak"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "windows.json").write_text(json.dumps([asdict(w) for w in windows], indent=1))
    text = report(windows, checks, header)
    (args.out / "report.md").write_text(text)
    print("\n".join(checks))
    if first_error:
        print(f"[soak] first error: {first_error}", file=sys.stderr)
    print(f"[soak] wrote {args.out / 'report.md'}")
    return 1 if any(w.errors for w in windows) or first_error else 0
