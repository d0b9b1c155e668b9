"""Summaries, markdown tables and PNG plots for routing benchmark runs.

A :class:`RouterRun` holds everything measured for one router on one scenario: the per-request
results of the load generator, counters read from the servers' ``/metrics`` before and after the run
(prefix-cache hits and queries), the picker's decision-time histogram and CPU time when the router
is our picker, and a timeline of per-replica running+waiting requests sampled during the run.
:func:`summarize` turns it into the figures of the report table; :func:`write_report` writes
``report.md`` and the plots.

Per-replica shares count every replica of the fleet (``RouterRun.servers``), so one that got no
request shows as a share of 0 (max/min = inf). "idle while queued" is the fraction of load samples in
which some replica had nothing to do while another held more than ``max_num_seqs`` requests (so some
were waiting): the herding/hot-spot symptom.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.slo import SloAttainment, attainment
from simulator.loadgen import RequestResult
from simulator.workloads import percentile

__all__ = ["RouterRun", "Summary", "histogram_quantile", "summarize", "write_report"]


@dataclass(slots=True)
class RouterRun:
    router: str
    scenario: str
    results: list[RequestResult]
    duration_s: float
    offered_rps: float = math.nan
    prefix_hits: float = 0.0  # tokens, delta over the run, summed over servers
    prefix_queries: float = 0.0
    oracle_hit_rate: float = math.nan
    decision_buckets: list[tuple[float, float]] = field(default_factory=list)  # (le, cumulative count)
    picker_cpu_s: float | None = None
    timeline: list[tuple[float, dict[str, int]]] = field(default_factory=list)  # (t, port -> load)
    notes: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)  # every replica's label: those given no request count
    max_num_seqs: int = 16  # load above this on a replica means requests wait in its queue
    slos: dict[int, tuple[float, float]] = field(default_factory=dict)  # index -> (TTFT, TPOT) SLO ms
    ttft_mape: float = math.nan  # the picker's latency model: recent TTFT median abs % error (fraction)
    ttft_mape_samples: int = 0  # predictions that error is over (the model's bounded window)


@dataclass(frozen=True, slots=True)
class Summary:
    router: str
    requests: int
    errors: int
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    itl_p50: float
    itl_p90: float
    e2e_p90: float
    output_tps: float
    rps: float
    hit_rate: float
    hit_vs_oracle: float
    share_max_min: float
    share_max_vs_mean: float
    decision_p50: float
    decision_p99: float
    cpu_s_per_1k: float
    idle_while_queued: float = math.nan  # fraction of load samples with one replica idle, another queueing
    makespan_s: float = math.nan  # first request sent to last request finished
    shares: tuple[float, ...] = ()  # fraction of the successful requests each server got (run.servers order)
    slo: SloAttainment | None = None  # requests that carried an SLO (None: the scenario sends none)
    ttft_mape: float = math.nan
    ttft_mape_samples: int = 0
    groups: int = 0  # distinct prefix groups among the successful requests that name one
    group_servers: int = 0  # distinct (server, group) pairs serving them: groups = pairs when none moved
    group_moves: int = 0  # a group's request served elsewhere than the group's previous one (by send time)

    def row(self) -> list[str]:
        def ms(v: float) -> str:
            return "–" if math.isnan(v) else f"{v * 1000:.0f}" if v >= 0.01 else f"{v * 1000:.2f}"

        def num(v: float, fmt: str = ".1f") -> str:
            return "–" if math.isnan(v) else format(v, fmt)

        return [
            self.router,
            ms(self.ttft_p50),
            ms(self.ttft_p90),
            ms(self.ttft_p99),
            ms(self.itl_p50),
            ms(self.itl_p90),
            ms(self.e2e_p90),
            num(self.output_tps, ".0f"),
            num(self.rps, ".2f"),
            num(self.makespan_s, ".1f"),
            str(self.errors),
            "–" if math.isnan(self.hit_rate) else f"{self.hit_rate:.1%}",
            "–" if math.isnan(self.hit_vs_oracle) else f"{self.hit_vs_oracle:.0%}",
            num(self.share_max_min, ".2f"),
            num(self.decision_p50 * 1000, ".2f") if not math.isnan(self.decision_p50) else "–",
            num(self.decision_p99 * 1000, ".2f") if not math.isnan(self.decision_p99) else "–",
            num(self.cpu_s_per_1k, ".2f"),
            "–" if math.isnan(self.idle_while_queued) else f"{self.idle_while_queued:.0%}",
        ]


HEADER = [
    "router",
    "TTFT p50 ms",
    "TTFT p90 ms",
    "TTFT p99 ms",
    "ITL p50 ms",
    "ITL p90 ms",
    "e2e p90 ms",
    "out tok/s",
    "req/s",
    "makespan s",
    "errors",
    "hit rate",
    "hit/oracle",
    "share max/min",
    "decide p50 ms",
    "decide p99 ms",
    "picker CPU s/1k req",
    "idle while queued",
]


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float:
    """Prometheus-style quantile from cumulative ``(upper_bound, count)`` buckets (linear in-bucket)."""
    if not buckets:
        return math.nan
    bs = sorted(buckets)
    total = bs[-1][1]
    if total <= 0:
        return math.nan
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in bs:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            if c == prev_c:
                return le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return bs[-1][0]


def summarize(run: RouterRun) -> Summary:
    ok = [r for r in run.results if r.ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = [x for r in ok for x in r.itl]
    e2e = [r.e2e for r in ok if r.e2e is not None]
    out_tokens = sum(r.output_tokens for r in ok)
    dur = run.duration_s if run.duration_s > 0 else math.nan
    shares: dict[str, int] = dict.fromkeys(run.servers, 0)
    for r in ok:
        if r.server:
            shares[r.server] = shares.get(r.server, 0) + 1
    counts = sorted(shares.values())
    hit = run.prefix_hits / run.prefix_queries if run.prefix_queries > 0 else math.nan
    oracle = run.oracle_hit_rate
    share_max_min = (counts[-1] / counts[0] if counts[0] > 0 else math.inf) if counts else math.nan
    return Summary(
        router=run.router,
        requests=len(run.results),
        errors=len(run.results) - len(ok),
        ttft_p50=percentile(ttft, 50),
        ttft_p90=percentile(ttft, 90),
        ttft_p99=percentile(ttft, 99),
        itl_p50=percentile(itl, 50),
        itl_p90=percentile(itl, 90),
        e2e_p90=percentile(e2e, 90),
        output_tps=out_tokens / dur,
        rps=len(ok) / dur,
        hit_rate=hit,
        hit_vs_oracle=hit / oracle if oracle > 0 else math.nan,
        share_max_min=share_max_min,
        share_max_vs_mean=(counts[-1] / (sum(counts) / len(counts))) if counts else math.nan,
        decision_p50=histogram_quantile(0.5, run.decision_buckets),
        decision_p99=histogram_quantile(0.99, run.decision_buckets),
        cpu_s_per_1k=(run.picker_cpu_s / len(run.results) * 1000)
        if run.picker_cpu_s is not None and run.results
        else math.nan,
        idle_while_queued=_idle_while_queued(run),
        makespan_s=dur,
        shares=tuple(shares.get(label, 0) / len(ok) for label in run.servers) if ok else (),
        slo=attainment(run.results, run.slos) if run.slos else None,
        ttft_mape=run.ttft_mape,
        ttft_mape_samples=run.ttft_mape_samples,
        **_placement(ok),
    )


def _placement(ok: Sequence[RequestResult]) -> dict[str, int]:
    """How the groups were spread: distinct groups, (server, group) pairs, and moves between servers."""
    last: dict[str, str] = {}
    pairs: set[tuple[str, str]] = set()
    moves = 0
    for r in sorted((r for r in ok if r.group and r.server), key=lambda r: (r.sent_at, r.index)):
        previous = last.get(r.group)
        moves += previous is not None and previous != r.server
        last[r.group] = r.server
        pairs.add((r.server, r.group))
    return {"groups": len(last), "group_servers": len(pairs), "group_moves": moves}


def _idle_while_queued(run: RouterRun) -> float:
    """Fraction of timeline samples where a replica had no request while another had some waiting."""
    if not run.timeline:
        return math.nan
    labels = run.servers or sorted({p for _, loads in run.timeline for p in loads})
    bad = 0
    for _t, loads in run.timeline:
        values = [loads.get(label, 0) for label in labels]
        bad += min(values) == 0 and max(values) > run.max_num_seqs
    return bad / len(run.timeline)


def markdown_table(rows: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _plot_ttft_cdf(runs: Sequence[RouterRun], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        xs = sorted(r.ttft * 1000 for r in run.results if r.ok and r.ttft is not None)
        if xs:
            ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=run.router)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"TTFT CDF — {runs[0].scenario}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_timeline(run: RouterRun, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ports = sorted({p for _, loads in run.timeline for p in loads})
    for port in ports:
        ax.plot([t for t, _ in run.timeline], [loads.get(port, 0) for _, loads in run.timeline], label=port)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("running + waiting")
    ax.set_title(f"Per-replica load — {run.router} — {run.scenario}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_throughput(sweep: Mapping[str, Sequence[tuple[float, float]]], scenario: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for router, points in sweep.items():
        pts = sorted(points)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=router)
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"Throughput vs offered load — {scenario}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    out_dir: Path,
    scenarios: Mapping[str, Sequence[RouterRun]],
    *,
    header_notes: Sequence[str] = (),
    checks: Mapping[str, Sequence[str]] | None = None,
    sweeps: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]] | None = None,
    scenario_notes: Mapping[str, Sequence[str]] | None = None,
    overall_checks: Sequence[str] = (),
) -> Path:
    """Write ``report.md`` and PNG plots into ``out_dir``; return the report path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    parts: list[str] = ["# Routing benchmark report", ""]
    parts += [f"- {n}" for n in header_notes]
    for scenario, runs in scenarios.items():
        if not runs:
            continue
        parts += ["", f"## {scenario}", ""]
        for note in (scenario_notes or {}).get(scenario, ()):
            parts += [note, ""]
        oracle = runs[0].oracle_hit_rate
        if not math.isnan(oracle):
            parts.append(f"Oracle (infinite-cache) prefix hit rate: {oracle:.1%}.")
            parts.append("")
        summaries = [summarize(r) for r in runs]
        parts.append(markdown_table([s.row() for s in summaries]))
        parts += _slo_and_model_lines(summaries)
        cdf = out_dir / f"{scenario}-ttft-cdf.png"
        _plot_ttft_cdf(runs, cdf)
        parts += ["", f"![TTFT CDF]({cdf.name})"]
        for run in runs:
            if run.timeline:
                tl = out_dir / f"{scenario}-{run.router}-load.png"
                _plot_timeline(run, tl)
                parts.append(f"![load {run.router}]({tl.name})")
        if sweeps and scenario in sweeps:
            tp = out_dir / f"{scenario}-throughput.png"
            _plot_throughput(sweeps[scenario], scenario, tp)
            parts.append(f"![throughput]({tp.name})")
        for run in runs:
            parts += [f"- {run.router}: {note}" for note in run.notes]
        if checks and scenario in checks:
            parts += ["", "### Targets", ""] + [f"- {c}" for c in checks[scenario]]
    if overall_checks:
        parts += ["", "## Targets across scenarios", ""] + [f"- {c}" for c in overall_checks]
    path = out_dir / "report.md"
    path.write_text("\n".join(parts) + "\n")
    return path


SLO_HEADER = [
    "router",
    "with SLO",
    "admitted",
    "rejected (429)",
    "attainment",
    "tight attainment",
    "after warm-up",
]


def _slo_and_model_lines(summaries: Sequence[Summary]) -> list[str]:
    """The SLO attainment table (runs whose requests carried SLOs) and the latency model's error."""
    parts: list[str] = []
    rows = [
        [
            s.router,
            str(s.slo.requests),
            str(s.slo.admitted),
            str(s.slo.rejected),
            "–" if math.isnan(s.slo.rate) else f"{s.slo.rate:.1%}",
            "–" if math.isnan(s.slo.tight_rate) else f"{s.slo.tight_rate:.1%}",
            "–" if math.isnan(s.slo.warm_rate) else f"{s.slo.warm_rate:.1%}",
        ]
        for s in summaries
        if s.slo is not None
    ]
    if rows:
        parts += [
            "",
            "SLO attainment (admitted requests, client-side TTFT):",
            "",
            markdown_table(rows, SLO_HEADER),
        ]
    for s in summaries:
        if not math.isnan(s.ttft_mape):
            parts += [
                "",
                f"{s.router}: latency model TTFT median absolute error {s.ttft_mape:.1%} "
                f"over its last {s.ttft_mape_samples} predictions",
            ]
    return parts


def as_json(summary: Summary) -> dict[str, Any]:
    return {k: getattr(summary, k) for k in Summary.__slots__}
