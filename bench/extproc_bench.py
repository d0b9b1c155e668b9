"""``epp-bench extproc-envoy``: what the picker costs behind the real Envoy, per request and per chunk.

One stack (:mod:`devtools.stack`): ``--servers`` simulated servers in one process with near-zero latency
(TTFT 0, ITL ``--itl``), the picker (plaintext, default configuration, scheduling over every server)
and Envoy (one worker). For each Envoy configuration (``envoy-only`` = round-robin without the
picker, then the picker variants of ``deploy/envoy``), each body size (1 KB, 200 KB: the 200 KB prompt
is a few very long words, so the simulator's tokenizer stays cheap and the picker's body handling is
what is measured), each response kind (``plain``: one token, not streamed; ``stream``: SSE with
``--tokens`` output tokens) and each concurrency, a closed-loop load runs for ``--seconds``.

Load generator: ``wrk`` (Debian package; ``apt-get install wrk``) when on PATH, else a built-in
aiohttp client (which is itself CPU-bound on two cores: its figures are a lower bound).

Reported per point: req/s, latency p50/p99 (ms), added p50 = p50 minus envoy-only's at the same body,
kind and concurrency; picker CPU µs per request (``/proc/<pid>/stat`` utime+stime delta, minus the
picker's idle CPU rate (measured first, with no traffic: metrics polling) times the duration, divided
by the requests);
Envoy CPU µs per request; ext_proc messages per request (Envoy's ``ext_proc.stream_msgs_sent``).
Per streamed chunk: (picker CPU per streamed request − per plain request) / (messages per streamed
request − per plain request), i.e. the marginal cost of one more response-body message.
Targets (2 cores): ≤ 200 µs per 1 KB request, ≤ 2 ms per 200 KB request, ≤ 30 µs per streamed chunk,
added p50 ≤ 3 ms at about half the measured max throughput; each is printed as PASS or MISS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from devtools.stack import Stack, StackSpec
from epp.config.flags import ManualHelpFormatter
from simulator.workloads import percentile

__all__ = ["Point", "main", "parse_wrk", "picker_cpu_seconds"]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CONFIGS = ("envoy-only", "gie-fail-closed", "gie-fail-open", "no-response-body", "observability")
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Point:
    config: str
    body: str
    kind: str
    concurrency: int
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    picker_us_per_req: float  # net of the picker's idle CPU (metrics polling) over the same time
    envoy_us_per_req: float
    msgs_per_req: float
    errors: int
    think_ms: int = 0  # > 0: paced load (each connection waits this long between requests)


def picker_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_wrk(out: str) -> tuple[int, float, float, int]:
    """(requests, p50 ms, p99 ms, errors) from ``wrk --latency`` output."""
    requests = int(re.search(r"(\d+) requests in ", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"^\s*50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s*99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    errors = 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    return requests, p50, p99, errors


def _body(size: str, kind: str, tokens: int) -> bytes:
    if size == "1k":
        prompt = " ".join(f"word{i % 50}" for i in range(120))[:900]
    else:  # 200 KB in a few long words: cheap to tokenize, full size for the picker to parse and hash
        prompt = " ".join(chr(97 + i) * 12_500 for i in range(16))
    body: dict[str, Any] = {"model": MODEL, "prompt": prompt, "ignore_eos": True}
    if kind == "stream":
        body |= {"max_tokens": tokens, "stream": True, "stream_options": {"include_usage": True}}
    else:
        body["max_tokens"] = 1
    return json.dumps(body).encode()


def _wrk(
    url: str, body: bytes, concurrency: int, seconds: float, workdir: Path, think_ms: int = 0
) -> tuple[int, float, float, int]:
    payload = workdir / "body.json"
    payload.write_bytes(body)
    script = workdir / "post.lua"
    script.write_text(
        'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{payload}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
        # uniform think time around the mean so connections do not fall into lockstep bursts
        + (f"function delay()\n  return math.random(0, {2 * think_ms})\nend\n" if think_ms > 0 else "")
    )
    argv = [
        "wrk",
        "-t1",
        f"-c{concurrency}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=True)
    return parse_wrk(proc.stdout)


async def _python_load(
    url: str, body: bytes, concurrency: int, seconds: float
) -> tuple[int, float, float, int]:
    import aiohttp

    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
                await r.read()
                errors += r.status != 200
            latencies.append((time.perf_counter() - start) * 1000)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return len(latencies), percentile(latencies, 50), percentile(latencies, 99), errors


def _ext_proc_msgs(stack: Stack) -> float:
    text = httpx.get(f"{stack.admin_url}/stats", params={"filter": "ext_proc"}, timeout=5.0).text
    return sum(float(v) for k, v in re.findall(r"^(\S*stream_msgs_sent): (\d+)$", text, re.M))


def _envoy_cpu(stack: Stack) -> float:
    return picker_cpu_seconds(stack.envoy.pid) if stack.envoy else 0.0


def idle_cpu_rate(stack: Stack, seconds: float = 2.0) -> float:
    """The picker's CPU seconds per second with no traffic (polling the servers' metrics)."""
    assert stack.picker is not None
    cpu0, t0 = picker_cpu_seconds(stack.picker.pid), time.perf_counter()
    time.sleep(seconds)
    return (picker_cpu_seconds(stack.picker.pid) - cpu0) / (time.perf_counter() - t0)


@contextlib.contextmanager
def bench_stack(
    *,
    servers: int,
    itl: str,
    picker_args: str,
    envoy_variant: str | None,
    tag: str,
    picker_script: Path | None = None,
) -> Iterator[tuple[Stack, float]]:
    """The stack the Envoy benchmarks drive, started, and the picker's idle CPU rate measured on it.

    ``servers`` simulated servers in one ``epp-sim`` process (no time to first token, ``itl`` between
    tokens, room for 512 sequences), the picker at ``-v 0`` plus ``picker_args`` (a shell-quoted string),
    Envoy rendered ``envoy_variant`` (None: started later with ``stack.start_envoy``). Progress lines
    are printed prefixed ``[tag]``; the stack is stopped when the block ends. ``picker_script``: a Python
    file run as the picker instead of ``-m epp`` (a prototype engine)."""
    sim_args = (
        "--time-to-first-token", "0",
        "--inter-token-latency", itl,
        "--max-num-seqs", "512",
        "--kv-cache-size", "65536",
        "--served-model-name", MODEL,
        "--log-level", "warning",
    )  # fmt: skip
    spec = StackSpec(
        servers=servers,
        sim_args=sim_args,
        single_sim_process=True,
        envoy_variant=envoy_variant,
        picker_args=("-v", "0", *shlex.split(picker_args)),
        picker_program=(str(picker_script.resolve()),) if picker_script else ("-m", "epp"),
    )
    with Stack(spec, progress=lambda m: print(f"[{tag}] {m}", flush=True)) as stack:
        yield stack, idle_cpu_rate(stack)


def measure(
    stack: Stack,
    config: str,
    body: bytes,
    size: str,
    kind: str,
    concurrency: int,
    seconds: float,
    idle_rate: float = 0.0,
    think_ms: int = 0,
) -> Point:
    url = f"{stack.base_url}/v1/completions"
    use_wrk = shutil.which("wrk") is not None
    picker_pid = stack.picker.pid if stack.picker and config != "envoy-only" else None
    cpu0 = picker_cpu_seconds(picker_pid) if picker_pid else 0.0
    env0, msgs0, t0 = _envoy_cpu(stack), _ext_proc_msgs(stack), time.perf_counter()
    if use_wrk:
        n, p50, p99, errors = _wrk(url, body, concurrency, seconds, stack.workdir, think_ms)
    else:
        n, p50, p99, errors = asyncio.run(_python_load(url, body, concurrency, seconds))
    elapsed = time.perf_counter() - t0
    cpu = max(0.0, picker_cpu_seconds(picker_pid) - cpu0 - idle_rate * elapsed) if picker_pid else 0.0
    env, msgs = _envoy_cpu(stack) - env0, _ext_proc_msgs(stack) - msgs0
    per = max(n, 1)
    return Point(
        config,
        size,
        kind,
        concurrency,
        n,
        n / seconds,
        p50,
        p99,
        cpu / per * 1e6,
        env / per * 1e6,
        msgs / per,
        errors,
        think_ms,
    )


def run(args: argparse.Namespace) -> list[Point]:
    points: list[Point] = []
    started = bench_stack(
        servers=args.servers,
        itl=args.itl,
        picker_args=args.picker_args,
        envoy_variant=None,
        tag="extproc-envoy",
        picker_script=args.picker_script,
    )
    with started as (stack, idle):
        print(
            f"[extproc-envoy] picker idle CPU (polling {args.servers} servers): {idle * 1000:.0f} ms/s",
            flush=True,
        )
        for config in args.configs:
            stack.start_envoy("round-robin" if config == "envoy-only" else config)
            for size in args.bodies:
                for kind in args.kinds:
                    body = _body(size, kind, args.tokens)
                    for c in args.concurrency:
                        p = measure(stack, config, body, size, kind, c, args.seconds, idle)
                        points.append(p)
                        print(
                            f"[extproc-envoy] {config:<17} {size:>4} {kind:<6} c={c:<3} {p.rps:8.0f} req/s "
                            f"p50 {p.p50_ms:7.2f} ms p99 {p.p99_ms:7.2f} ms "
                            f"picker {p.picker_us_per_req:7.0f} us/req "
                            f"msgs/req {p.msgs_per_req:5.1f} errors {p.errors}",
                            flush=True,
                        )
        if shutil.which("wrk") and {"envoy-only", "gie-fail-closed"} <= set(args.configs):
            points += half_load_points(stack, points, args.seconds, idle)
    return points


def half_load_points(stack: Stack, points: Sequence[Point], seconds: float, idle: float) -> list[Point]:
    """The GIE config and Envoy alone at about half the GIE config's measured maximum (1 KB, plain).

    Paced load: 16 connections, each waiting a uniformly random 0..2x``think_ms`` after every response
    (random so that the connections do not synchronise into bursts), the mean chosen so that
    16 / (think + the GIE config's p50 at concurrency 1) is half the maximum req/s; if the rate is off
    by more than 10% of the maximum, the think time is corrected once with the latency measured.
    """
    gie = [p for p in points if p.config == "gie-fail-closed" and p.body == "1k" and p.kind == "plain"]
    if not gie:
        return []
    peak = max(p.rps for p in gie)
    low = min(gie, key=lambda p: p.concurrency)
    conns = 16
    think = max(1, round(conns / (peak / 2) * 1000 - low.p50_ms))
    body = _body("1k", "plain", 1)
    stack.start_envoy("gie-fail-closed")
    for _ in range(2):  # one correction: the latency under this load replaces the unloaded p50
        picked = measure(stack, "gie-fail-closed", body, "1k", "plain", conns, seconds, idle, think_ms=think)
        _print_paced(picked)
        if abs(picked.rps - peak / 2) <= 0.1 * peak:
            break
        think = max(1, round(conns / (peak / 2) * 1000 - picked.p50_ms))
    stack.start_envoy("round-robin")
    alone = measure(stack, "envoy-only", body, "1k", "plain", conns, seconds, idle, think_ms=picked.think_ms)
    _print_paced(alone)
    return [picked, alone]


def _print_paced(p: Point) -> None:
    line = f"{p.config:<17} paced (think {p.think_ms} ms) {p.rps:8.0f} req/s p50 {p.p50_ms:.2f} ms"
    print(f"[extproc-envoy] {line}", flush=True)


def _key(p: Point) -> tuple[str, str, int, int]:
    return (p.body, p.kind, p.concurrency, p.think_ms)


def _paced(p: Point) -> str:
    return f" paced {p.think_ms} ms" if p.think_ms else ""


def report(points: Sequence[Point]) -> str:
    base = {_key(p): p for p in points if p.config == "envoy-only"}
    lines = [
        "| config | body | response | conc. | req/s | p50 ms | p99 ms | added p50 ms | picker µs/req "
        "| Envoy µs/req | ext_proc msgs/req | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        b = base.get(_key(p))
        added = p.p50_ms - b.p50_ms if b and p.config != "envoy-only" else math.nan
        lines.append(
            f"| {p.config} | {p.body} | {p.kind} | {p.concurrency}{_paced(p)} "
            f"| {p.rps:.0f} "
            f"| {p.p50_ms:.2f} | {p.p99_ms:.2f} "
            f"| {added:.2f} | {p.picker_us_per_req:.0f} | {p.envoy_us_per_req:.0f} | {p.msgs_per_req:.1f} "
            f"| {p.errors} |"
        )
    return "\n".join(lines)


def verdicts(points: Sequence[Point]) -> list[str]:
    """PASS/MISS lines for the targets, from the GIE-style configuration's points."""
    gie = [p for p in points if p.config == "gie-fail-closed"]
    out: list[str] = []

    def best(size: str, kind: str) -> Point | None:
        cands = [p for p in gie if p.body == size and p.kind == kind and p.requests > 0]
        return min(cands, key=lambda p: p.picker_us_per_req) if cands else None

    for size, target in (("1k", 200.0), ("200k", 2000.0)):
        p = best(size, "plain")
        if p:
            verdict = "PASS" if p.picker_us_per_req <= target else "MISS"
            out.append(
                f"{verdict} picker CPU per {size} request: {p.picker_us_per_req:.0f} µs "
                f"(target ≤ {target:.0f})"
            )
    plain, stream = best("1k", "plain"), best("1k", "stream")
    if plain and stream and stream.msgs_per_req > plain.msgs_per_req:
        chunk = (stream.picker_us_per_req - plain.picker_us_per_req) / (
            stream.msgs_per_req - plain.msgs_per_req
        )
        out.append(
            f"{'PASS' if chunk <= 30 else 'MISS'} picker CPU per streamed chunk: {chunk:.1f} µs (target ≤ 30)"
        )
    base = {_key(p): p for p in points if p.config == "envoy-only"}
    plain_1k = sorted((p for p in gie if p.body == "1k" and p.kind == "plain"), key=lambda p: p.concurrency)
    if plain_1k:
        peak = max(p.rps for p in plain_1k)
        paced = [p for p in plain_1k if p.think_ms]
        half = paced[0] if paced else min(plain_1k, key=lambda p: abs(p.rps - peak / 2))
        b = base.get(_key(half))
        if b:
            added = half.p50_ms - b.p50_ms
            out.append(
                f"{'PASS' if added <= 3 else 'MISS'} added p50 at c={half.concurrency}"
                f"{_paced(half)} "
                f"({half.rps:.0f} req/s, "
                f"max {peak:.0f}): {added:.2f} ms (target ≤ 3)"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter,
        prog="epp-bench extproc-envoy",
        description=__doc__.split("\n")[0],
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="concurrency 1 and 32 (the maximum-throughput point), 2 s per point",
    )
    p.add_argument("--servers", type=int, default=16, help="simulated servers (one epp-sim process)")
    p.add_argument("--seconds", type=float, default=4.0, help="measurement time per point, seconds")
    p.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 8, 32],
        help="connections in flight, comma-separated",
    )
    p.add_argument(
        "--configs",
        type=lambda s: s.split(","),
        default=list(CONFIGS),
        help="Envoy configurations to measure, comma-separated",
    )
    p.add_argument(
        "--bodies",
        type=lambda s: s.split(","),
        default=["1k", "200k"],
        help="request body sizes, comma-separated",
    )
    p.add_argument(
        "--kinds",
        type=lambda s: s.split(","),
        default=["plain", "stream"],
        help="response kinds, comma-separated: plain, stream",
    )
    p.add_argument("--tokens", type=int, default=256, help="output tokens per request")
    p.add_argument("--itl", default="100us", help="simulated inter-token latency (default 100us)")
    p.add_argument("--picker-args", default="", help="extra picker flags, e.g. '--grpc-engine=grpcio'")
    p.add_argument(
        "--picker-script",
        type=Path,
        default=None,
        help="run this Python file as the picker instead of `-m epp` (a prototype that patches the "
        "picker, then calls epp.cli.main)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default bench/results/<UTC date>/extproc-envoy)",
    )
    args = p.parse_args(argv)
    if args.quick:
        # 32, not a middle value: the per-request CPU target is about the picker at its maximum throughput
        args.seconds, args.concurrency = 2.0, [1, 32]
    unknown = set(args.configs) - set(CONFIGS)
    if unknown:
        p.error(f"--configs: unknown {sorted(unknown)}; expected some of {', '.join(CONFIGS)}")
    generator = "wrk" if shutil.which("wrk") else "python aiohttp (no wrk on PATH)"
    print(f"[extproc-envoy] load generator: {generator}")
    points = run(args)
    table, checks = report(points), verdicts(points)
    if args.out is None:
        day = dt.datetime.now(dt.UTC).date().isoformat()
        args.out = Path(__file__).resolve().parents[1] / "bench" / "results" / day / "extproc-envoy"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "points.json").write_text(json.dumps([asdict(p) for p in points], indent=1))
    # The generator moves every figure: the aiohttp client is CPU-bound on two cores, so the picker reaches
    # less throughput, fewer requests share each of its loop iterations and its CPU per request reads higher.
    script = f", picker script {args.picker_script}" if args.picker_script else ""
    notes = f"Load generator: {generator}; extra picker flags: {args.picker_args or '(none)'}{script}.\n\n"
    (args.out / "report.md").write_text(notes + table + "\n\n" + "\n".join(f"- {c}" for c in checks) + "\n")
    print(table)
    print("\n".join(checks))
    print(f"[extproc-envoy] wrote {args.out / 'report.md'}")
    return 1 if any(p.errors for p in points) else 0
