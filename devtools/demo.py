"""``make demo`` / ``python -m devtools.demo``: the picker against Envoy round-robin on four
simulated servers.

What it does, printing progress as it goes:

1. starts four simulated vLLM servers (8B/H100 profile, time-scaled; a KV cache sized so one server
   cannot hold every shared prefix but the fleet can), the picker with its default configuration, and
   Envoy with the GIE-style configuration (``deploy/envoy/gie-fail-closed.yaml``, plaintext);
2. sends a seeded shared-prefix workload (groups of prompts sharing a long system prompt, streamed,
   Poisson arrivals) through Envoy + picker;
3. restarts the servers (cold caches) and sends the same workload through Envoy round-robin
   (``deploy/envoy/round-robin.yaml``);
4. prints a side-by-side table: requests per server, prefix-cache hit rate measured at the servers
   (``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total``), TTFT p50/p90, output
   tokens/s and requests/s; then stops everything it started (also on Ctrl-C or SIGTERM) and removes
   its temporary folder (``/tmp/epp-stack-*``, the process logs).

Ctrl-C works at any moment, whatever the caller did with SIGINT (a shell's background job ignores it,
and children inherit that): the demo installs Python's default handler first. Starting and stopping
processes defer the interrupt until the step is done (:class:`devtools.stack.SigintDeferred`); during a
workload it cancels the load cleanly. The exit status is then 130, with one line on stderr and no
traceback.

``--quick`` runs a smaller workload faster (used by the tests). Exit status 0 on success, 1 when a
run had errors or a process failed to start.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from devtools.stack import SigintDeferred, Stack, StackError, StackSpec
from simulator.loadgen import LoadOptions, RequestResult, run_load
from simulator.workloads import Workload, WorkloadParams, build_workload, percentile

__all__ = ["FULL", "QUICK", "DemoSettings", "RunSummary", "format_table", "main", "run_demo", "summarize"]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DemoSettings:
    time_scale: float
    kv_blocks: int
    groups: int
    prompts_per_group: int
    system_tokens: int
    question_tokens: int
    output_tokens: int
    rate: float


FULL = DemoSettings(
    time_scale=2.0,
    kv_blocks=160,
    groups=10,
    prompts_per_group=8,
    system_tokens=500,
    question_tokens=40,
    output_tokens=32,
    rate=4.0,
)
QUICK = DemoSettings(
    time_scale=10.0,
    kv_blocks=96,
    groups=6,
    prompts_per_group=4,
    system_tokens=400,
    question_tokens=30,
    output_tokens=16,
    rate=12.0,
)


@dataclass(frozen=True, slots=True)
class RunSummary:
    router: str
    requests: int
    errors: int
    per_server: tuple[int, ...]
    hit_rate: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    output_tps: float
    rps: float


def _workload(s: DemoSettings) -> Workload:
    params = WorkloadParams(
        model=MODEL,
        groups=s.groups,
        prompts_per_group=s.prompts_per_group,
        system_tokens=s.system_tokens,
        question_tokens=s.question_tokens,
        output_tokens=s.output_tokens,
        rate=s.rate,
        arrival="poisson",
        stream=True,
    )
    return build_workload("shared-prefix", params)


def _prefix_counters(stack: Stack) -> tuple[float, float]:
    """(hits, queries) summed over the servers, in tokens."""
    hits = queries = 0.0
    for i in range(len(stack.servers)):
        text = httpx.get(f"{stack.server_url(i)}/metrics", timeout=5.0).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "vllm:prefix_cache_hits_total":
                    hits += sample.value
                elif sample.name == "vllm:prefix_cache_queries_total":
                    queries += sample.value
    return hits, queries


def summarize(router: str, stack: Stack, results: Sequence[RequestResult], seconds: float) -> RunSummary:
    ok = [r for r in results if r.ok]
    ttft = [r.ttft * 1000 for r in ok if r.ttft is not None]
    by_port = {str(p): 0 for p in stack.ports.servers}
    for r in ok:
        by_port[r.server] = by_port.get(r.server, 0) + 1
    hits, queries = _prefix_counters(stack)
    return RunSummary(
        router=router,
        requests=len(results),
        errors=len(results) - len(ok),
        per_server=tuple(by_port[str(p)] for p in stack.ports.servers),
        hit_rate=hits / queries if queries else 0.0,
        ttft_p50_ms=percentile(ttft, 50),
        ttft_p90_ms=percentile(ttft, 90),
        output_tps=sum(r.output_tokens for r in ok) / seconds,
        rps=len(ok) / seconds,
    )


def format_table(runs: Sequence[RunSummary]) -> str:
    rows = [
        ("requests (errors)", [f"{r.requests} ({r.errors})" for r in runs]),
        ("requests per server", ["/".join(str(n) for n in r.per_server) for r in runs]),
        ("prefix-cache hit rate", [f"{r.hit_rate:.1%}" for r in runs]),
        ("TTFT p50", [f"{r.ttft_p50_ms:.0f} ms" for r in runs]),
        ("TTFT p90", [f"{r.ttft_p90_ms:.0f} ms" for r in runs]),
        ("output tokens/s", [f"{r.output_tps:.0f}" for r in runs]),
        ("requests/s", [f"{r.rps:.2f}" for r in runs]),
    ]
    width = max(len(name) for name, _ in rows)
    cols = [max(len(r.router), *(len(v[i]) for _, v in rows)) for i, r in enumerate(runs)]
    lines = [" | ".join([" " * width, *(r.router.rjust(c) for r, c in zip(runs, cols, strict=True))])]
    lines.append("-+-".join(["-" * width, *("-" * c for c in cols)]))
    for name, values in rows:
        lines.append(
            " | ".join([name.ljust(width), *(v.rjust(c) for v, c in zip(values, cols, strict=True))])
        )
    return "\n".join(lines)


def _drive(stack: Stack, router: str, workload: Workload) -> RunSummary:
    print(f"[demo] {router}: sending {len(workload.requests)} streamed requests through Envoy", flush=True)
    opts = LoadOptions(base_url=stack.base_url, mode="arrival", time_limit_s=300.0, request_timeout_s=60.0)
    start = time.perf_counter()
    results = run_interruptibly(lambda: run_load(workload, opts))
    summary = summarize(router, stack, results, time.perf_counter() - start)
    print(f"[demo] {router}: done, hit rate {summary.hit_rate:.1%}, {summary.errors} errors", flush=True)
    return summary


def run_interruptibly(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(factory())`` where Ctrl-C cancels the coroutine and then raises KeyboardInterrupt.

    The event loop is created and closed, and the coroutine created, with SIGINT deferred, so an
    interrupt never lands half-way through them (which would leave a half-made loop or a coroutine
    never awaited); inside, SIGINT cancels the coroutine's task."""
    with SigintDeferred() as deferred:
        interrupted, result = asyncio.run(_cancel_on_sigint(factory, deferred))
    if interrupted:
        raise KeyboardInterrupt
    assert result is not None
    return result


async def _cancel_on_sigint(
    factory: Callable[[], Coroutine[Any, Any, T]], deferred: SigintDeferred
) -> tuple[bool, T | None]:
    if deferred.take():
        return True, None
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    hits: list[int] = []

    def on_sigint(signum: int, _frame: FrameType | None) -> None:
        hits.append(signum)
        loop.call_soon_threadsafe(task.cancel)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        return False, await factory()
    except asyncio.CancelledError:
        if not hits:
            raise
        return True, None
    finally:
        signal.signal(signal.SIGINT, previous)
        deferred.pending = deferred.pending or bool(hits)


def run_demo(settings: DemoSettings) -> list[RunSummary]:
    """Run both configurations and return their summaries (picker first)."""
    sim_args = (
        "--profile", "8b-h100",
        "--time-scale", str(settings.time_scale),
        "--kv-cache-size", str(settings.kv_blocks),
        "--served-model-name", MODEL,
    )  # fmt: skip
    spec = StackSpec(servers=4, sim_args=sim_args, envoy_variant="gie-fail-closed")
    workload = _workload(settings)

    def progress(msg: str) -> None:
        print(f"[demo] {msg}", flush=True)

    with Stack(spec, progress=progress) as stack:
        progress(f"Envoy on {stack.base_url}, picker metrics on {stack.metrics_url}")
        progress(f"process logs in {stack.workdir} (removed when the demo ends)")
        picker = _drive(stack, "Envoy + picker", workload)
        progress("restarting the model servers (cold caches) and switching Envoy to round-robin")
        stack.stop_picker()
        stack.restart_servers()
        stack.start_envoy("round-robin")
        baseline = _drive(stack, "Envoy round-robin", workload)
        progress("stopping everything")
    return [picker, baseline]


def _sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devtools.demo", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller, faster workload (for tests)")
    ns = p.parse_args(argv)
    try:
        # Ctrl-C must work even when the caller ignores SIGINT (a background job: `(make demo &)`)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _sigterm)
        settings = QUICK if ns.quick else FULL
        runs = run_demo(settings)
    except KeyboardInterrupt:
        print("[demo] interrupted; everything it started has been stopped", file=sys.stderr)
        return 130
    except StackError as exc:
        print(f"[demo] could not start the stack: {exc}", file=sys.stderr)
        return 1
    print()
    print(format_table(runs))
    picker, baseline = runs
    if baseline.hit_rate > 0:
        print(f"\nprefix-cache hit rate: {picker.hit_rate / baseline.hit_rate:.1f}x round-robin's")
    return 1 if any(r.errors for r in runs) else 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:  # before main() took over (e.g. while importing)
        raise SystemExit(130) from None
