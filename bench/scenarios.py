"""Routing benchmark scenarios: a workload, the fleet that serves it, and how it is driven.

The engine is the simulator's ``8b-h100`` profile (16 running sequences, 30 ms + 250 µs per uncached
prompt token of prefill, 12 ms per output token, 1024 KV blocks of 16 tokens) with
``--prefill-slots 1``: a server prefills one prompt at a time, as a GPU whose prefill is compute-bound,
so uncached prompt tokens cost throughput and not only latency. ``time_scale`` runs the engine that
many times faster than real time; workload rates are given in *simulated* requests per second and
converted (``rate × time_scale`` real requests per second), so the engine sees the same load at any
scale and only the wall-clock time and the CPU use change.

Sizing (shared-prefix, 4 servers): 16 groups × a 3,000-token system prompt = 188 blocks per group,
3,008 blocks in all: more than one server's 1,024 blocks, less than the fleet's 4,096. A router that
keeps each group on one server needs about 4 groups (752 blocks) per server and hits its cache; one
that spreads every group over every server thrashes it and pays 0.8 s of serial prefill per miss. The
rate (12 simulated req/s) is above what round-robin can prefill (about 7 req/s for the fleet) and well
below what a cache-hitting fleet can (more than 40 req/s), so queueing decides the tail.

few-prefixes: 3 groups at 40 simulated req/s (real time: the clock is not sped up, to spare the CPU),
more than three cache-hitting servers can prefill (about 12 req/s each), so sending each group only to
the server that holds it leaves one server idle while the others queue.

``smoke`` scales a scenario down (fewer requests, faster clock) for the end-to-end test. Every
scenario but the opt-in ones (``slo``: per-request SLOs for the predicted-latency profile, run with
``--scenario slo``) runs in ``make bench`` (``epp-bench routing --quick``: all scenarios, no rate sweep).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bench.slo import SloMix
from simulator.workloads import WorkloadParams

__all__ = ["MODEL", "SCENARIOS", "Scenario", "capacity_shares", "server_args", "sim_args", "smoke"]

MODEL = "sim-model"


@dataclass(frozen=True, slots=True)
class Scenario:
    """One benchmark scenario. ``rate`` is in simulated req/s (see the module docstring)."""

    name: str
    workload: str
    params: WorkloadParams
    servers: int = 4
    time_scale: float = 2.0
    mode: str = "arrival"  # arrival | concurrency
    concurrency: int = 32
    time_limit_s: float = 120.0
    extra_sim_args: tuple[str, ...] = ()
    routers: tuple[str, ...] = ()  # () = every router
    sweep_rates: tuple[float, ...] = ()  # simulated req/s for the throughput-vs-load plot
    server_speeds: tuple[float, ...] = ()  # relative engine speed per server (() = all 1.0)
    slo: SloMix | None = None  # per-request SLO headers (bench.slo); pickers get its objectives file
    opt_in: bool = False  # run only when named (--scenario NAME), not by 'all' / --quick
    notes: tuple[str, ...] = field(default_factory=tuple)

    def real_params(self, rate: float | None = None) -> WorkloadParams:
        """Workload parameters with the rate converted to real requests per second."""
        return replace(self.params, rate=(rate if rate is not None else self.params.rate) * self.time_scale)


def server_args(scenario: Scenario) -> list[list[str]]:
    """Per-server extra simulator args: a server of relative speed s runs at ``time_scale x s``."""
    return [
        [] if speed == 1.0 else ["--time-scale", f"{scenario.time_scale * speed:g}"]
        for speed in scenario.server_speeds
    ]


def capacity_shares(scenario: Scenario) -> list[float]:
    """Each server's share of the fleet's capacity (its speed over the sum of speeds)."""
    speeds = list(scenario.server_speeds) or [1.0] * scenario.servers
    speeds += [1.0] * (scenario.servers - len(speeds))
    return [v / sum(speeds) for v in speeds]


def sim_args(scenario: Scenario) -> list[str]:
    return [
        "--model",
        MODEL,
        "--profile",
        "8b-h100",
        "--prefill-slots",
        "1",
        "--time-scale",
        str(scenario.time_scale),
        *scenario.extra_sim_args,
    ]


_SHARED = WorkloadParams(
    model=MODEL,
    groups=16,
    prompts_per_group=20,
    system_tokens=3000,
    question_tokens=100,
    output_tokens=16,
    rate=12.0,
    arrival="poisson",
)

_LOAD_ROUTERS = ("envoy-round-robin", "envoy-least-request", "vllm-router-power-of-two", "picker-load-only")

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("shared-prefix", "shared-prefix", _SHARED, sweep_rates=(4.0, 8.0, 16.0)),
        Scenario(
            "few-prefixes",
            "few-prefixes",
            replace(_SHARED, groups=3, prompts_per_group=100, rate=40.0),
            time_scale=1.0,
        ),
        Scenario("no-sharing", "no-sharing", replace(_SHARED, requests=160, system_tokens=900, rate=4.0)),
        Scenario(
            "bursty",
            "shared-prefix",
            replace(
                _SHARED, arrival="bursts", rate=6.0, burst_factor=6.0, burst_every_s=6.0, burst_len_s=1.0
            ),
        ),
        Scenario(
            "multi-turn",
            "multi-turn",
            replace(_SHARED, sessions=24, turns=6, system_tokens=1600, question_tokens=150),
            time_scale=1.0,
            mode="concurrency",
            concurrency=24,
            extra_sim_args=("--kv-cache-size", "768"),
            notes=(
                "24 chat clients, each sending 6 turns through /v1/chat/completions, every turn the whole "
                "history plus a new message (a turn waits for the previous answer); up to ~110 blocks per "
                "conversation, 768 KV blocks per server: a server holds about 6 conversations, so the fleet "
                "holds all 24 only if each stays on one server. Real time.",
            ),
        ),
        Scenario(
            "working-set",
            "shared-prefix",
            replace(_SHARED, groups=24, prompts_per_group=10, system_tokens=2000, rate=10.0),
            extra_sim_args=("--kv-cache-size", "384"),
            notes=(
                "24 groups x 2,000-token system prompts = 3,000 blocks against 4 x 384 = 1,536 blocks of "
                "KV in the fleet: the working set is 2x what the fleet can hold.",
            ),
        ),
        Scenario(
            "saturated",
            "shared-prefix",
            replace(_SHARED, groups=24, prompts_per_group=12, system_tokens=2000),
            time_scale=1.0,
            mode="concurrency",
            concurrency=24,
            extra_sim_args=("--kv-cache-size", "512"),
            notes=(
                "24 closed-loop clients keep the fleet saturated (one prefill at a time per server); "
                "24 groups x 125 blocks against 4 x 512 blocks: working set 1.5x the fleet's KV. Real time.",
            ),
        ),
        Scenario(
            "half-shared",
            "half-shared",
            replace(_SHARED, groups=12, prompts_per_group=10, system_tokens=1500, rate=13.0),
            notes=(
                "120 shared-prefix prompts (12 groups) and 120 unique prompts of the same length, shuffled.",
            ),
        ),
        Scenario(
            "heterogeneous",
            "shared-prefix",
            replace(_SHARED, groups=12, prompts_per_group=16, rate=8.0),
            server_speeds=(0.5, 1.0, 1.0, 1.0),
            notes=(
                "one server (the first) runs its engine at half the speed of the others; its capacity share "
                "is 0.5 / 3.5 = 14% of the requests.",
            ),
        ),
        Scenario(
            "slo",
            "shared-prefix",
            replace(_SHARED, groups=12, prompts_per_group=24, rate=10.0),
            server_speeds=(0.5, 1.0, 1.0, 1.0),
            slo=SloMix(
                tight_ttft_ms=400, loose_ttft_ms=3000, tight_fraction=0.5, tpot_ms=50, sheddable_fraction=0.5
            ),
            routers=("picker-predicted", "picker-default", "vllm-router-cache-aware"),
            opt_in=True,
            notes=(
                "the heterogeneous fleet (one half-speed server) at 10 simulated req/s; every request "
                "carries x-slo-ttft-ms, 400 ms (wall clock; an uncached prompt alone takes about 400 ms "
                "to prefill) for half of them, 3,000 ms for the others, and x-slo-tpot-ms 50 ms; "
                "half (drawn independently) name an InferenceObjective of priority -1, which "
                "latency-slo-admitter may reject with 429. Attainment counts admitted requests only.",
            ),
        ),
        Scenario(
            "shared-prefix-8",
            "shared-prefix",
            replace(_SHARED, groups=32, prompts_per_group=10, rate=24.0),
            servers=8,
            notes=("8 servers, 32 groups: the shared-prefix shape at twice the fleet.",),
        ),
        Scenario(
            "shared-prefix-16",
            "shared-prefix",
            replace(_SHARED, groups=64, prompts_per_group=6, rate=40.0),
            servers=16,
            time_scale=1.0,
            notes=("16 servers, 64 groups, real time (to spare the CPU): shared-prefix at 4x the fleet",),
        ),
        Scenario(
            "lora-mix",
            "lora-mix",
            replace(_SHARED, requests=240, system_tokens=1200, rate=8.0),
            extra_sim_args=(
                "--max-loras",
                "2",
                "--lora-load-time",
                "300ms",
                "--lora-modules",
                *(f"{a}=/adapters/{a}" for a in _SHARED.adapters),
            ),
        ),
        Scenario(
            "large-prompts",
            "large-prompts",
            replace(_SHARED, requests=48, output_tokens=8),
            mode="concurrency",
            concurrency=16,
            extra_sim_args=(
                "--kv-cache-size",
                "16384",
                "--prefill-time-per-token",
                "10us",
                "--prefill-slots",
                "0",
            ),
            routers=("envoy-round-robin", "picker-default", "picker-load-only"),
        ),
    )
}


def smoke(scenario: Scenario) -> Scenario:
    """A scaled-down scenario for the end-to-end tests: 256 KV blocks per server, a 4x clock.

    Shared prefixes: 8 groups x 6 prompts of 75 blocks (more than one server holds, less than four).
    Multi-turn: 13 conversations of 4 turns (up to ~65 blocks each), 13 clients: a server holds about 4
    conversations, so only a router that keeps each conversation on one server hits its cache. 13, not
    a multiple of the 4 servers: clients in step would otherwise send each conversation back to the
    same server under round-robin.
    """
    kv = ("--kv-cache-size", "256")
    if scenario.workload == "multi-turn":
        p = replace(scenario.params, sessions=13, turns=4, system_tokens=800, question_tokens=100)
        return replace(
            scenario, params=p, time_scale=4.0, time_limit_s=40.0, concurrency=13, extra_sim_args=kv, notes=()
        )
    p = replace(scenario.params, groups=8, prompts_per_group=6, system_tokens=1200, rate=6.0)
    return replace(
        scenario, params=p, time_scale=4.0, time_limit_s=40.0, sweep_rates=(), extra_sim_args=kv, notes=()
    )
