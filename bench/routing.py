"""``epp-bench routing``: routing quality of the picker against Envoy and vllm-router on a simulated fleet.

For each scenario (:mod:`bench.scenarios`) and each router (:mod:`bench.routers`) in turn: start a
fresh fleet of ``epp-sim`` servers (cold caches) and the router, drive the scenario's seeded workload
with the load generator (:mod:`simulator.loadgen`), and collect what the report needs: per-request results
(JSONL under ``<out>/raw/``), the servers' prefix-cache counter deltas, per-replica running+waiting
sampled every 0.5 s, and for the picker its decision-time histogram delta and CPU seconds. The oracle
hit rate is computed with the simulator's tokenizer and block size. A short rate sweep of the
shared-prefix scenario gives the throughput-vs-offered-load plot. ``report.md`` (tables, PASS/MISS
target lines, plots) is written into ``--out`` (default ``bench/results/<UTC date>/``). A scenario with
per-request SLOs (:mod:`bench.slo`) also gets each router's SLO attainment and 429 count; a picker
with a latency model (``picker-predicted``) its TTFT prediction error from ``/debug/plugins/state``.

Usage::

    epp-bench routing --scenario shared-prefix [--routers picker-default,envoy-round-robin]
    epp-bench routing --scenario slo   # opt-in: per-request SLOs, SLO attainment and 429s
    epp-bench routing --quick          # every scenario, no rate sweep (what `make bench` runs)
    epp-bench routing                  # every scenario and the shared-prefix rate sweep
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench.metrics_scrape import (
    LoadSampler,
    bucket_delta,
    histogram_buckets,
    proc_cpu_seconds,
    scrape_servers,
)
from bench.oracle import workload_oracle
from bench.report import RouterRun, summarize, write_report
from bench.routers import ROUTERS, RouterSpec, RunningRouter, running_router
from bench.scenarios import MODEL, SCENARIOS, Scenario, server_args, sim_args, smoke
from bench.slo import OBJECTIVES, apply_slo, slo_targets
from bench.targets import check, check_predicted_overall
from epp.config.flags import ManualHelpFormatter
from simulator.loadgen import LoadOptions, RequestResult, run_load
from simulator.workloads import Workload, build_workload

__all__ = ["main", "run_router", "run_scenario"]

BLOCK_SIZE = 16  # the 8b-h100 profile's; the servers' block size for the oracle


def _log(msg: str) -> None:
    print(f"[routing {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _duration(results: Sequence[RequestResult]) -> float:
    ends = [r.sent_at + r.e2e for r in results if r.e2e is not None]
    return max(ends) - min(r.sent_at for r in results) if ends else math.nan


async def _measure(
    running: RunningRouter, scenario: Scenario, workload: Workload, raw: Path | None, progress: bool
) -> RouterRun:
    async with httpx.AsyncClient(timeout=5.0) as client:
        urls = running.server_urls
        before = await scrape_servers(client, urls)
        hist_before: list[tuple[float, float]] = []
        cpu_before = 0.0
        if running.picker_pid is not None:
            hist_before = histogram_buckets((await client.get(running.picker_metrics_url + "/metrics")).text)
            cpu_before = proc_cpu_seconds(running.picker_pid)
        sampler = LoadSampler(client, dict(zip(urls, running.server_labels, strict=True)))
        sampler.start()
        opts = LoadOptions(
            base_url=running.base_url,
            mode=scenario.mode,
            concurrency=scenario.concurrency,
            time_limit_s=scenario.time_limit_s,
            progress=progress,
        )
        try:
            results = await run_load(workload, opts, raw)
        finally:
            timeline = await sampler.stop()
        after = await scrape_servers(client, urls)
        run = RouterRun(
            router=running.spec.name,
            scenario=scenario.name,
            results=results,
            duration_s=_duration(results),
            offered_rps=len(workload.requests) / workload.duration_s if workload.duration_s > 0 else math.nan,
            prefix_hits=sum(after[u].prefix_hits - before[u].prefix_hits for u in after if u in before),
            prefix_queries=sum(
                after[u].prefix_queries - before[u].prefix_queries for u in after if u in before
            ),
            timeline=timeline,
            servers=list(running.server_labels),
        )
        if len(after) < len(urls):
            run.notes.append(f"only {len(after)} of {len(urls)} servers answered /metrics after the run")
        if running.picker_pid is not None:
            run.picker_cpu_s = proc_cpu_seconds(running.picker_pid) - cpu_before
            text = (await client.get(running.picker_metrics_url + "/metrics")).text
            run.decision_buckets = bucket_delta(hist_before, histogram_buckets(text))
            await _read_plugin_state(client, running.picker_metrics_url, run)
        return run


async def _read_plugin_state(client: httpx.AsyncClient, metrics_url: str, run: RouterRun) -> None:
    """From ``/debug/plugins/state``: the latency model's recent TTFT median absolute percentage error,
    when the picker has one, and a note naming the endpoints ``prefix-affinity-scorer`` judged slow and
    the prefixes it kept off them (docs/scheduler.md, "Slower servers"), when it judged any."""
    try:
        state = (await client.get(metrics_url + "/debug/plugins/state")).json()
    except (httpx.HTTPError, ValueError) as exc:
        run.notes.append(f"/debug/plugins/state unreadable: {exc}")
        return
    for name, plugin in state.items() if isinstance(state, dict) else ():
        if not isinstance(plugin, dict):
            continue
        model = plugin.get("model")
        if isinstance(model, dict) and "ttftMedianAbsPctError" in model:
            mape = model["ttftMedianAbsPctError"]
            run.ttft_mape = math.nan if mape is None else float(mape)
            run.ttft_mape_samples = int(model.get("ttftErrorSamples") or 0)
        note = _slow_note(name, plugin)
        if note:
            run.notes.append(note)


def _slow_note(name: str, plugin: Mapping[str, Any]) -> str:
    """``prefix-affinity-scorer``'s slow endpoints (relative speed) and diverted prefixes, or ''."""
    speeds, diverted = plugin.get("speeds"), plugin.get("diverted")
    if not isinstance(speeds, dict) or not isinstance(diverted, dict):
        return ""
    slow = speeds.get("slow") or []
    relative = speeds.get("relative_speed") or {}
    total = plugin.get("diversions") or 0
    if not slow and not diverted and not total:
        return ""
    judged = ", ".join(f"{a} at {relative.get(a, math.nan):.2f} of the fastest" for a in slow) or "none now"
    kept = ", ".join(f"{n} off {a}" for a, n in diverted.items()) or "none now"
    return f"{name}: slow endpoints: {judged}; prefixes diverted: {kept} ({total} in all)"


def run_router(
    spec: RouterSpec,
    scenario: Scenario,
    workload: Workload,
    oracle: float,
    workdir: Path,
    *,
    raw: Path | None = None,
    progress: bool = True,
) -> RouterRun:
    """One router on one scenario, on a freshly started fleet. A scenario with an SLO mix gives a
    picker its objectives file (the sheddable InferenceObjective)."""
    picker_args: list[str] = []
    if scenario.slo is not None and spec.kind == "picker":
        workdir.mkdir(parents=True, exist_ok=True)
        objectives = workdir / "objectives.yaml"
        objectives.write_text(OBJECTIVES, encoding="utf-8")
        picker_args = ["--objectives-file", str(objectives)]
    with running_router(
        spec,
        picker_args=picker_args,
        servers=scenario.servers,
        sim_args=sim_args(scenario),
        server_args=server_args(scenario),
        model=MODEL,
        workdir=workdir,
        progress=_log,
    ) as running:
        _log(f"{scenario.name}: {spec.name}: {len(workload.requests)} requests")
        run = asyncio.run(_measure(running, scenario, workload, raw, progress))
    run.oracle_hit_rate = oracle
    run.slos = slo_targets(workload)
    s = summarize(run)
    _log(
        f"{scenario.name}: {spec.name}: TTFT p90 {s.ttft_p90 * 1000:.0f} ms, {s.output_tps:.0f} tok/s, "
        f"hit {s.hit_rate:.1%} (oracle {oracle:.1%}), errors {s.errors}"
    )
    return run


COMPARED = (
    "envoy-round-robin",
    "envoy-least-request",
    "vllm-router-round-robin",
    "vllm-router-cache-aware",
    "vllm-router-power-of-two",
    "picker-default",
    "picker-gie-default",
)
"""The routers every scenario runs unless ``--routers`` or the scenario says otherwise."""


def _routers_for(scenario: Scenario, names: Sequence[str] | None) -> list[RouterSpec]:
    chosen = list(names) if names else list(scenario.routers or COMPARED)
    return [ROUTERS[n] for n in chosen]


def _workload(scenario: Scenario, rate: float | None = None) -> Workload:
    workload = build_workload(scenario.workload, scenario.real_params(rate))
    return workload if scenario.slo is None else apply_slo(workload, scenario.slo)


def run_scenario(
    scenario: Scenario, routers: Sequence[RouterSpec], out: Path, progress: bool = True
) -> list[RouterRun]:
    workload = _workload(scenario)
    oracle = workload_oracle(workload.requests, BLOCK_SIZE, MODEL)
    n, dur = len(workload.requests), workload.duration_s
    _log(f"{scenario.name}: {n} requests over {dur:.1f}s, oracle {oracle:.1%}")
    runs = []
    for spec in routers:
        raw = out / "raw" / f"{scenario.name}-{spec.name}.jsonl"
        runs.append(
            run_router(
                spec,
                scenario,
                workload,
                oracle,
                out / "raw" / "work" / scenario.name / spec.name,
                raw=raw,
                progress=progress,
            )
        )
    return runs


def run_sweep(
    scenario: Scenario, routers: Sequence[RouterSpec], out: Path, progress: bool = True
) -> dict[str, list[tuple[float, float]]]:
    """Output tokens/s per router at each of ``scenario.sweep_rates`` (offered load in simulated req/s)."""
    points: dict[str, list[tuple[float, float]]] = {r.name: [] for r in routers}
    for rate in scenario.sweep_rates:
        workload = _workload(scenario, rate)
        for spec in routers:
            work = out / "raw" / "work" / f"sweep-{rate:g}" / spec.name
            run = run_router(spec, scenario, workload, math.nan, work, progress=progress)
            # Throughput in simulated time, like the rate axis.
            points[spec.name].append((rate, summarize(run).output_tps / scenario.time_scale))
    return points


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter, prog="epp-bench routing", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--scenario",
        action="append",
        help=f"one of {', '.join(SCENARIOS)} or 'all' (repeatable; default all; "
        f"'all' leaves out the opt-in {', '.join(n for n, s in SCENARIOS.items() if s.opt_in)})",
    )
    p.add_argument(
        "--routers", help=f"comma-separated subset of: {', '.join(ROUTERS)} (default {','.join(COMPARED)})"
    )
    p.add_argument("--quick", action="store_true", help="every scenario, without the rate sweep (make bench)")
    p.add_argument("--smoke", action="store_true", help="scaled-down scenarios (the end-to-end test)")
    p.add_argument("--no-sweep", action="store_true", help="skip the throughput-vs-load sweep")
    p.add_argument(
        "--sweep-routers",
        default="envoy-round-robin,vllm-router-cache-aware,picker-default",
        help="routers the sweep compares, comma-separated",
    )
    p.add_argument("--seed", type=int, default=42, help="workload random seed")
    p.add_argument("--out", type=Path, help="output folder (default bench/results/<UTC date>)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines")
    return p


def _scenarios(ns: argparse.Namespace) -> list[Scenario]:
    names: list[str] = []
    for n in ns.scenario or ["all"]:
        names += [k for k, s in SCENARIOS.items() if not s.opt_in] if n == "all" else [n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise SystemExit(
            f"epp-bench routing: unknown scenario {unknown[0]!r}; expected one of {', '.join(SCENARIOS)}"
        )
    chosen = [SCENARIOS[n] for n in dict.fromkeys(names)]
    chosen = [replace(s, params=replace(s.params, seed=ns.seed)) for s in chosen]
    return [smoke(s) for s in chosen] if ns.smoke else chosen


def _notes(argv: Sequence[str] | None, scenarios: Sequence[Scenario], started: float) -> list[str]:
    args = " ".join(argv if argv is not None else sys.argv[1:])
    now = datetime.datetime.now(datetime.UTC)
    notes = [
        f"command: `epp-bench routing {args}`",
        f"date (UTC): {now:%Y-%m-%d %H:%M}, wall time {time.monotonic() - started:.0f} s",
        "fleet: epp-sim --profile 8b-h100 --prefill-slots 1 (one process per server), fresh for every router",
        "TTFT/ITL/e2e are wall-clock at the client; simulated time runs time_scale x faster",
    ]
    notes += [
        f"{s.name}: {s.servers} servers, time scale {s.time_scale:g}, {s.workload} workload, "
        f"{s.mode} mode, rate {s.params.rate:g} simulated req/s ({s.params.rate * s.time_scale:g} real)"
        + (f", concurrency {s.concurrency}" if s.mode == "concurrency" else "")
        for s in scenarios
    ]
    return notes


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    scenarios = _scenarios(ns)
    names = [n.strip() for n in ns.routers.split(",") if n.strip()] if ns.routers else None
    for n in names or []:
        if n not in ROUTERS:
            raise SystemExit(
                f"epp-bench routing: unknown router {n!r}; expected some of {', '.join(ROUTERS)}"
            )
    out: Path = ns.out or Path("bench/results") / datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    started = time.monotonic()
    results: dict[str, list[RouterRun]] = {}
    checks: dict[str, list[str]] = {}
    sweeps: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for scenario in scenarios:
        runs = run_scenario(scenario, _routers_for(scenario, names), out, progress=not ns.no_progress)
        results[scenario.name] = runs
        checks[scenario.name] = check(scenario, {r.router: summarize(r) for r in runs})
        if scenario.sweep_rates and not ns.no_sweep and not ns.quick:
            sweep_names = [n for n in ns.sweep_routers.split(",") if n in ROUTERS]
            sweeps[scenario.name] = run_sweep(
                scenario, [ROUTERS[n] for n in sweep_names], out, not ns.no_progress
            )
    overall = check_predicted_overall({n: {r.router: summarize(r) for r in rs} for n, rs in results.items()})
    report = write_report(
        out,
        results,
        header_notes=_notes(argv, scenarios, started),
        checks=checks,
        overall_checks=overall,
        sweeps=sweeps,
        scenario_notes={s.name: s.notes for s in scenarios},
    )
    for lines in [*checks.values(), overall]:
        for line in lines:
            print(line)
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
