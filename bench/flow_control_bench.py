"""``epp-bench flow-control``: flow control on vs off, on the simulated fleet through the real Envoy.

Each fleet scenario runs twice in the same invocation, with the same configuration except the
``flowControl`` gate (``concurrency-detector`` at each server's ``--max-num-seqs``, as detector and
as a filter; fairness by tenant with ``fair-share-fairness-policy`` (ours: round-robin, and a tenant
over its share stops at ``1 - reserve`` of the pool while another is active; :data:`RESERVE` 0.5,
``activeWindowSeconds: 0.25``: B's closed-loop clients resend within a round trip) in the non-negative
bands, round-robin in the negative ones; ``priority-holdback-policy`` with ``minCeiling: 0.5``, so the
lowest provisioned band stops at half the pool; without the gate the legacy admission sheds sheddable
requests with 429). The tenant scenarios run on a stack without
InferenceObjectives (one priority band, 0); the priority scenario on a fresh stack with the objectives
``critical`` (10) and ``sheddable`` (-1), whose bands (10, 0, -1) are provisioned as a cluster's
objectives provision them.
Closed-loop clients stream ``/v1/completions``; TTFT is the time to the first response byte. The noisy
groups (tenant A, the sheddable class) run in a second load-generator process, so the measured
clients (B, critical) do not share an event loop with them.

* noisy neighbour: tenant A runs 5x the fleet's slots in clients, tenant B 20%; target: B's TTFT p90
  with flow control <= 1.5x B's solo baseline (the figure without flow control is printed too, and
  A's throughput on vs off: the reserve's cost);
* priorities under 2x overload: ``critical`` (priority 10) 0.5x, ``sheddable`` (-1) 1.5x; target:
  critical TTFT p90 <= 1.3x its unloaded value, and only sheddable requests are shed;
* scheduling regret: one tenant at 2x; target: TTFT p90 and throughput with flow control no worse than
  without (10% allowance for run-to-run noise on a shared machine);
* zero lost requests: every request of every scenario gets a 200, or a 429/503 with a JSON reason;
* picker CPU added by queueing (in process, no network): CPU per request of the controller on the
  fast path and through the queue; target <= 50 us.

Prints each figure with PASS or MISS, and where the time went: each group's mean wait in the picker's
flow-control queue (the picker's ``..._request_queue_duration_seconds`` histogram), TTFT p50, and the
phase's mean TTFT inside the simulators (their ``vllm:time_to_first_token_seconds``, all groups) and
the measuring process's event-loop lag (how late a 10 ms timer wakes: CPU contention on the machine),
which its TTFT figures also carry.
``--quick``: shorter phases (the ``make bench`` form).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.flow_control_cpu import cpu_per_request
from bench.flow_control_report import Mode, Tally, report, verdict
from devtools.stack import Stack, StackSpec
from epp.config.flags import ManualHelpFormatter

__all__ = ["main"]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
RESERVE = 0.5
"""``fair-share-fairness-policy``'s reserve in the tenant band: with two tenants, neither may hold more
than half the pool while the other is active (a strict fair share). Measured against 0.25 (B's 2 of 8
slots) and 0.375 in docs/flow-control.md: with 0.25, B finds a free slot but is prefilled next to three
of A's requests, and its TTFT p90 stays at 1.5-2.5x solo."""
OBJECTIVES = """\
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: critical}
spec: {priority: 10}
---
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: sheddable}
spec: {priority: -1}
"""


def _config(slots: int, flow: bool, reserve: float) -> str:
    gate = "featureGates: [flowControl]\n" if flow else ""
    return f"""apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
{gate}plugins:
- type: concurrency-detector
  parameters: {{maxConcurrency: {slots}}}
- type: round-robin-fairness-policy
- type: fair-share-fairness-policy
  parameters: {{reserve: {reserve:g}, activeWindowSeconds: 0.25}}
- type: priority-holdback-policy
  parameters: {{minCeiling: 0.5}}
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: concurrency-detector}}, {{pluginRef: queue-scorer}}, {{pluginRef: max-score-picker}}]
saturationDetector: {{pluginRef: concurrency-detector}}
flowControl:
  saturationDetector: {{pluginRef: concurrency-detector}}
  defaultRequestTTL: 30s
  usageLimitPolicyPluginRef: priority-holdback-policy
  defaultPriorityBand: {{fairnessPolicyRef: fair-share-fairness-policy}}
  defaultNegativePriorityBand: {{maxRequests: "{slots}", fairnessPolicyRef: round-robin-fairness-policy}}
"""


async def _client(http: httpx.AsyncClient, url: str, headers: dict[str, str], tally: Tally, until: float,
                  max_tokens: int) -> None:  # fmt: skip
    body = {
        "model": MODEL,
        "prompt": "hello " * 20,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    while time.monotonic() < until:
        start = time.monotonic()
        try:
            async with http.stream("POST", url, json=body, headers=headers) as r:
                if r.status_code == 200:
                    first = True
                    async for _ in r.aiter_bytes():
                        if first:
                            tally.ttft.append(time.monotonic() - start)
                            first = False
                    tally.ok += 1
                    continue
                raw = await r.aread()
                reason = ""
                try:
                    reason = httpx.Response(200, content=raw).json()["error"]["message"]
                except Exception:
                    reason = ""
                if r.status_code in (429, 503) and reason:
                    tally.rejected += 1
                    await asyncio.sleep(0.05)  # a client backs off
                else:
                    tally.lost += 1
        except httpx.HTTPError:
            tally.lost += 1


QUEUE_WAIT = "inference_extension_flow_control_request_queue_duration_seconds"


async def _queue_waits(http: httpx.AsyncClient, stack: Stack) -> dict[str, tuple[float, float]]:
    """``{fairness_id: (sum, count)}`` of the picker's queue-duration histogram (every outcome)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, tuple[float, float]] = {}
    text = (await http.get(f"{stack.metrics_url}/metrics")).text
    for family in text_string_to_metric_families(text):
        if family.name != QUEUE_WAIT:
            continue
        for sample in family.samples:
            fid = sample.labels.get("fairness_id", "")
            total, count = out.get(fid, (0.0, 0.0))
            if sample.name == QUEUE_WAIT + "_sum":
                out[fid] = (total + sample.value, count)
            elif sample.name == QUEUE_WAIT + "_count":
                out[fid] = (total, count + sample.value)
    return out


SERVER_TTFT = "vllm:time_to_first_token_seconds"
TIME_SCALE = 4.0  # the simulators' --time-scale: their metrics are in simulated seconds


async def _server_ttft(http: httpx.AsyncClient, stack: Stack) -> tuple[float, float]:
    """``(sum, count)`` of the simulators' TTFT histograms, summed over the servers (simulated s)."""
    total = count = 0.0
    for i in range(len(stack.ports.servers)):
        for line in (await http.get(f"{stack.server_url(i)}/metrics")).text.splitlines():
            if line.startswith(SERVER_TTFT + "_sum"):
                total += float(line.rsplit(" ", 1)[1])
            elif line.startswith(SERVER_TTFT + "_count"):
                count += float(line.rsplit(" ", 1)[1])
    return total, count


async def _lag(until: float, samples: list[float]) -> None:
    """The event-loop lag of this process: how late a 10 ms sleep wakes up, until ``until``."""
    while time.monotonic() < until:
        start = time.monotonic()
        await asyncio.sleep(0.01)
        samples.append(time.monotonic() - start - 0.01)


Groups = dict[str, tuple[int, dict[str, str]]]


async def _clients(url: str, groups: Groups, until: float, max_tokens: int,
                   lags: list[float]) -> dict[str, Tally]:  # fmt: skip
    tallies = {name: Tally() for name in groups}
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    async with httpx.AsyncClient(timeout=60.0, limits=limits) as http:
        tasks = [
            _client(http, url, headers, tallies[name], until, max_tokens)
            for name, (clients, headers) in groups.items()
            for _ in range(clients)
        ]
        await asyncio.gather(*tasks, _lag(until, lags))
    return tallies


def _background(url: str, groups: Groups, max_tokens: int, ready: Any, start: Any, out: Any) -> None:
    """The load generator's process for the noisy groups: says ready, takes the end time, runs, and
    sends its tallies back."""
    ready.put(True)
    until = start.get()
    out.put(asyncio.run(_clients(url, groups, until, max_tokens, [])))


async def _phase(stack: Stack, groups: Groups, seconds: float, max_tokens: int,
                 background: Groups | None = None) -> dict[str, Tally]:  # fmt: skip
    """Run ``groups`` in this process (their TTFT is the measured figure) and ``background`` (the noisy
    load) in a separate process, so the measured clients do not share an event loop with the load."""
    url = f"{stack.base_url}/v1/completions"
    ctx = multiprocessing.get_context("spawn")
    ready, start, out = ctx.Queue(), ctx.Queue(), ctx.Queue()
    child = None
    if background:
        child = ctx.Process(target=_background, args=(url, background, max_tokens, ready, start, out))
        child.start()
        ready.get(timeout=60)
    async with httpx.AsyncClient(timeout=10.0) as http:
        before, server_before = await _queue_waits(http, stack), await _server_ttft(http, stack)
        until = time.monotonic() + seconds  # CLOCK_MONOTONIC: the same clock in both processes
        if child is not None:
            start.put(until)
        lags: list[float] = []
        tallies = await _clients(url, groups, until, max_tokens, lags)
        if child is not None:
            tallies.update(await asyncio.to_thread(out.get, True, 120))
            await asyncio.to_thread(child.join, 30)
        after, server_after = await _queue_waits(http, stack), await _server_ttft(http, stack)
    served = server_after[1] - server_before[1]
    for tally in tallies.values():
        tally.client_lag = sum(lags) / len(lags) if lags else math.nan
        if served:
            tally.server_ttft = (server_after[0] - server_before[0]) / served / TIME_SCALE
    for name, (_, headers) in {**groups, **(background or {})}.items():
        fid = headers["x-gateway-inference-fairness-id"]
        (s0, c0), (s1, c1) = before.get(fid, (0.0, 0.0)), after.get(fid, (0.0, 0.0))
        if c1 > c0:
            tallies[name].queue_wait = (s1 - s0) / (c1 - c0)
    return tallies


def _light_clients(fleet: int) -> int:
    """Tenant B's clients: 20% of the fleet's slots (at least one)."""
    return max(1, round(0.2 * fleet))


def _spec(
    flow: bool, servers: int, slots: int, objectives: Path | None, reserve: float = RESERVE
) -> StackSpec:
    extra = ("--objectives-file", str(objectives)) if objectives is not None else ()
    return StackSpec(
        servers=servers,
        sim_args=("--profile", "8b-h100", "--time-scale", f"{TIME_SCALE:g}", "--max-num-seqs", str(slots)),
        picker_args=(
            "--config-text",
            _config(slots, flow, reserve),
            *extra,
            "--allow-experimental-plugins",  # priority-holdback-policy is Alpha upstream
        ),
        single_sim_process=True,
    )


def _run_mode(flow: bool, servers: int, slots: int, seconds: float, max_tokens: int, workdir: Path,
              reserve: float = RESERVE) -> Mode:  # fmt: skip
    objectives = workdir / "objectives.yaml"
    objectives.write_text(OBJECTIVES)
    fleet = servers * slots
    a, b = {"x-gateway-inference-fairness-id": "tenant-a"}, {"x-gateway-inference-fairness-id": "tenant-b"}
    crit = {"x-gateway-inference-objective": "critical", "x-gateway-inference-fairness-id": "crit"}
    shed = {"x-gateway-inference-objective": "sheddable", "x-gateway-inference-fairness-id": "shed"}
    b_clients = _light_clients(fleet)
    run = asyncio.run
    with Stack(_spec(flow, servers, slots, None, reserve)) as stack:  # tenants: one band (priority 0)
        solo_b = run(_phase(stack, {"b": (b_clients, b)}, seconds, max_tokens))["b"]
        noisy = run(_phase(stack, {"b": (b_clients, b)}, seconds, max_tokens, {"a": (5 * fleet, a)}))
        saturated = run(_phase(stack, {"a": (2 * fleet, a)}, seconds, max_tokens))["a"]
    with Stack(_spec(flow, servers, slots, objectives, reserve)) as stack:  # bands 10, 0 and -1
        solo_critical = run(_phase(stack, {"c": (max(1, fleet // 2), crit)}, seconds, max_tokens))["c"]
        critical, sheddable = {"critical": (max(1, fleet // 2), crit)}, {"sheddable": (3 * fleet // 2, shed)}
        overload = run(_phase(stack, critical, seconds, max_tokens, sheddable))
    return Mode(solo_b, noisy, solo_critical, overload, saturated, seconds)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter,
        prog="epp-bench flow-control",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--quick", action="store_true", help="short phases (make bench)")
    parser.add_argument("--seconds", type=float, default=0.0, help="seconds per phase (default 12; quick 4)")
    parser.add_argument("--servers", type=int, default=2, help="simulated servers")
    parser.add_argument("--slots", type=int, default=4, help="--max-num-seqs per server (default 4)")
    parser.add_argument("--max-tokens", type=int, default=24, help="output tokens per request")
    parser.add_argument(
        "--reserve",
        type=float,
        default=RESERVE,
        help="fair-share-fairness-policy's reserve in the tenant band, in [0, 1)",
    )
    args = parser.parse_args(argv)
    seconds = args.seconds or (4.0 if args.quick else 12.0)
    fast, queued = cpu_per_request(20_000 if args.quick else 100_000)
    share_fast, share_queued = cpu_per_request(20_000 if args.quick else 100_000, fair_share=True)
    cpu_verdict = verdict(max(fast, queued, share_fast, share_queued) <= 50)
    print(
        f"picker CPU per request added by flow control: fast path {fast:.1f} us, queued {queued:.1f} us; "
        f"with fair-share-fairness-policy (hooks included) {share_fast:.1f} / {share_queued:.1f} us "
        f"(target <= 50 us): {cpu_verdict}"
    )
    modes: dict[str, Mode] = {}
    with tempfile.TemporaryDirectory(prefix="epp-bench-fc-") as tmp:
        for flow in (False, True):
            name = "on" if flow else "off"
            print(
                f"running the fleet scenarios with flow control {name} ({seconds:g}s per phase)...",
                flush=True,
            )
            modes[name] = _run_mode(
                flow, args.servers, args.slots, seconds, args.max_tokens, Path(tmp), args.reserve
            )
    off, on = modes["off"], modes["on"]
    for line in report(off, on):
        print(line)
    return 0
