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
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

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


@dataclass
class Tally:
    ttft: list[float] = field(default_factory=list)
    ok: int = 0
    rejected: int = 0  # 429/503 with a JSON reason
    lost: int = 0  # anything else
    queue_wait: float = math.nan  # mean seconds in the picker's flow-control queue (nan: none counted)
    server_ttft: float = math.nan  # the phase's mean TTFT inside the simulators (every group), wall-clock
    client_lag: float = math.nan  # mean lateness of the measuring process's 10 ms timer

    def p90(self) -> float:
        return self._quantile(0.9)

    def p50(self) -> float:
        return self._quantile(0.5)

    def _quantile(self, q: float) -> float:
        if not self.ttft:
            return math.nan
        values = sorted(self.ttft)
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


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


@dataclass
class Mode:
    solo_b: Tally
    noisy: dict[str, Tally]
    solo_critical: Tally
    overload: dict[str, Tally]
    saturated: Tally
    seconds: float


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


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _cpu_per_request(n: int, fair_share: bool = False) -> tuple[float, float]:
    """Microseconds of CPU per request the controller adds: fast path, and through the queue; with
    ``fair_share``, the band's policy is ``fair-share-fairness-policy`` and each request also runs its
    dispatch and completion hooks (its in-flight counting); otherwise ``round-robin-fairness-policy``."""
    from prometheus_client import CollectorRegistry

    from epp.flowcontrol.config import parse_flow_control, resolve_flow_control
    from epp.flowcontrol.controller import FlowController
    from epp.flowcontrol.metrics import FlowMetrics
    from epp.server.metric_catalog import Naming, by_key
    from epp.server.metric_twin import Twin
    from scheduler.plugins.flowcontrol.fair_share import FairShareFairness, FairShareParams
    from scheduler.plugins.flowcontrol.fairness import RoundRobinFairness
    from scheduler.types import Completion, LLMRequest, Outcome, SchedulingResult

    share = FairShareFairness("p", FairShareParams(0.25, 1.0))
    policy = share if fair_share else RoundRobinFairness("p")
    section = parse_flow_control({"defaultPriorityBand": {"fairnessPolicyRef": "p"}})
    config = resolve_flow_control(section, "llm-d.ai/v1alpha1", {"p": policy}.__getitem__, ("p",))
    result, completion = SchedulingResult("default", (), {}), Completion(Outcome.OK, 200)

    def served(r: LLMRequest) -> None:
        if fair_share:
            share.on_dispatched(r, result)
            share.on_completed(r, result, completion)

    class Detector:
        name = plugin_type = "bench"
        level = 0.0

        def saturation(self, endpoints: object, now: float) -> float:
            return self.level

        def is_saturated(self, endpoints: object, now: float) -> bool:
            return self.level >= 1

    requests = [LLMRequest(f"r{i}", "m", "m", fairness_id=f"t{i % 8}", priority=i % 3, body_size=100)
                for i in range(n)]  # fmt: skip
    endpoints = [object()]

    async def measure() -> tuple[float, float]:
        detector = Detector()
        registry = CollectorRegistry()  # the metrics are recorded as in the server
        keys = ("fc_queue_duration", "fc_dispatch_cycle", "fc_enqueue_duration", "fc_requests")
        recorder = FlowMetrics({k: Twin(by_key(k), Naming.BOTH, registry) for k in keys}, "pool")
        snapshot = lambda: endpoints  # noqa: E731
        flow = FlowController(config, detector, snapshot, recorder=recorder)  # type: ignore[arg-type]

        start = time.process_time()
        for r in requests:
            if flow.offer(r, partial(served, r)) is None:
                served(r)
        fast = (time.process_time() - start) / n * 1e6
        start = time.process_time()
        for batch in range(0, n, 3000):  # within the bands' default capacity (5000)
            detector.level = 1.0
            for r in requests[batch : batch + 3000]:
                flow.offer(r, partial(served, r))
            detector.level = 0.0
            flow.kick()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert not flow.queues.count
        queued = (time.process_time() - start) / n * 1e6
        return fast, queued

    return asyncio.run(measure())


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
    fast, queued = _cpu_per_request(20_000 if args.quick else 100_000)
    share_fast, share_queued = _cpu_per_request(20_000 if args.quick else 100_000, fair_share=True)
    verdict = _verdict(max(fast, queued, share_fast, share_queued) <= 50)
    print(
        f"picker CPU per request added by flow control: fast path {fast:.1f} us, queued {queued:.1f} us; "
        f"with fair-share-fairness-policy (hooks included) {share_fast:.1f} / {share_queued:.1f} us "
        f"(target <= 50 us): {verdict}"
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
    for line in _report(off, on):
        print(line)
    return 0


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1e3:.0f} ms"


def _change(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.0f}%" if old else "n/a"


def _report(off: Mode, on: Mode) -> list[str]:
    out = []
    b_solo, b_on, b_off = on.solo_b.p90(), on.noisy["b"].p90(), off.noisy["b"].p90()
    out.append(
        f"noisy neighbour: B TTFT p90 solo {_ms(b_solo)}; with A at 5x: flow control on {_ms(b_on)}, "
        f"off {_ms(b_off)} (target on <= 1.5x solo): {_verdict(b_on <= 1.5 * b_solo)}"
    )
    a_on, a_off = on.noisy["a"].ok / on.seconds, off.noisy["a"].ok / off.seconds
    b_on_thr, b_off_thr = on.noisy["b"].ok / on.seconds, off.noisy["b"].ok / off.seconds
    both_on, both_off = a_on + b_on_thr, a_off + b_off_thr
    out.append(
        f"  the reserve's cost: A's throughput with B, flow control on {a_on:.1f} / off {a_off:.1f} req/s "
        f"({_change(a_on, a_off)}); B's {b_on_thr:.1f} / {b_off_thr:.1f}; both "
        f"{both_on:.1f} / {both_off:.1f} req/s ({_change(both_on, both_off)})"
    )
    out.append(
        f"  mean wait in the picker's queue with flow control: B {_ms(on.noisy['b'].queue_wait)}, "
        f"A {_ms(on.noisy['a'].queue_wait)}; B TTFT p50 solo {_ms(on.solo_b.p50())}, "
        f"with A {_ms(on.noisy['b'].p50())}; mean TTFT inside the servers (all requests) solo "
        f"{_ms(on.solo_b.server_ttft)}, with A {_ms(on.noisy['b'].server_ttft)}; measuring process's "
        f"event-loop lag solo {_ms(on.solo_b.client_lag)}, with A {_ms(on.noisy['b'].client_lag)}"
    )
    crit_solo, crit, crit_off = on.solo_critical.p90(), on.overload["critical"], off.overload["critical"]
    shed_on, shed_off = on.overload["sheddable"], off.overload["sheddable"]
    out.append(
        f"priorities at 2x: critical TTFT p90 unloaded {_ms(crit_solo)}, loaded {_ms(crit.p90())} "
        f"(off: {_ms(crit_off.p90())}; target <= 1.3x): {_verdict(crit.p90() <= 1.3 * crit_solo)}"
    )
    out.append(
        f"  mean wait in the picker's queue with flow control: critical {_ms(crit.queue_wait)}, "
        f"sheddable {_ms(shed_on.queue_wait)}; critical TTFT p50 unloaded {_ms(on.solo_critical.p50())}, "
        f"loaded {_ms(crit.p50())}; mean TTFT inside the servers (all requests) unloaded "
        f"{_ms(on.solo_critical.server_ttft)}, loaded {_ms(crit.server_ttft)}; measuring process's "
        f"event-loop lag unloaded {_ms(on.solo_critical.client_lag)}, loaded {_ms(crit.client_lag)}"
    )
    out.append(
        f"  shed: sheddable {shed_on.rejected} (off {shed_off.rejected}), critical {crit.rejected} "
        f"(off {crit_off.rejected}) (target: only sheddable): "
        f"{_verdict(crit.rejected == 0 and shed_on.rejected > 0)}"
    )
    thr_on, thr_off = on.saturated.ok / on.seconds, off.saturated.ok / off.seconds
    p_on, p_off = on.saturated.p90(), off.saturated.p90()
    out.append(
        f"scheduling regret at 2x: TTFT p90 on {_ms(p_on)} / off {_ms(p_off)}, throughput on {thr_on:.1f} / "
        f"off {thr_off:.1f} req/s (target: no worse, 10% allowance): "
        f"{_verdict(p_on <= 1.1 * p_off and thr_on >= 0.9 * thr_off)}"
    )
    lost = {n: sum(t.lost for t in _tallies(m)) for n, m in (("on", on), ("off", off))}
    total = {n: sum(t.ok + t.rejected + t.lost for t in _tallies(m)) for n, m in (("on", on), ("off", off))}
    out.append(
        f"zero lost requests: on {lost['on']} of {total['on']}, off {lost['off']} of {total['off']} "
        f"(all others: 200, or 429/503 with a reason): {_verdict(not lost['on'] and not lost['off'])}"
    )
    return out


def _tallies(m: Mode) -> list[Tally]:
    return [m.solo_b, *m.noisy.values(), m.solo_critical, *m.overload.values(), m.saturated]
