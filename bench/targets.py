"""The routing targets as PASS/MISS lines, computed from the summaries of one run of one scenario.

For **every** scenario, ``picker-default`` (the built-in default profile) against
``vllm-router-cache-aware`` in the same run:

* server-side prefix-cache hit rate at least cache_aware's minus 1 point;
* TTFT p50 and TTFT p90 at most cache_aware's;
* output throughput at least cache_aware's;

and against ``envoy-round-robin``, wherever prompts share prefixes (every workload but
:data:`UNSHARED`): output throughput at least 1.5x round-robin's.

Per scenario, in addition:

* ``shared-prefix``: TTFT p90 at least 10x lower than round-robin's; hit rate at least 90% of the oracle;
* ``no-sharing``: output throughput and TTFT p90 within 5% of the best load-only router (:data:`LOAD_ONLY`);
* ``few-prefixes`` and ``bursty``: the busiest replica gets at most 1.5x the mean share of requests, and
  in at most 5% of the load samples a replica sits idle while another queues;
* a fleet with unequal servers (``server_speeds``): no server slower than the fastest gets more than
  its capacity share of the requests (its speed over the sum of speeds).

When ``picker-precise`` ran (the default profile with ``precise-prefix-cache-scorer`` fed by the
servers' KV events): its hit rate at least, and its TTFT p90 at most, those of ``picker-default`` and
of cache_aware. When ``picker-precise-x2`` ran too (two active-active replicas behind one Envoy): its
hit rate at most 2 points below one replica's; with ``picker-default-x2`` and ``picker-default``, the
approximate profile's change with two replicas is printed beside it (an ``INFO`` line, no target), and
so is each ``-hash`` variant's (``newPrefixPlacement: hash``) with its ``-hash-x2``. When
``picker-precise-sync-x2`` or ``picker-default-sync-x2`` ran (two replicas sharing ownership and load
over ``--replica-sync-port``): its hit rate at most 2 points below the one-replica profile's.

When ``picker-predicted`` ran (the predicted-latency profile, ``deploy/configs/predicted-latency.yaml``;
issue 18's targets), and likewise for ``picker-predicted-precise`` (the same profile with the model's
cached tokens from the precise index, ``deploy/configs/predicted-latency-precise.yaml``):

* TTFT p90 never worse than 1.05x the best fixed-weight picker profile's (:data:`FIXED_WEIGHT`) in
  the same run, and at most cache_aware's;
* the latency model's TTFT median absolute percentage error (its last up to 256 predictions, read
  from ``/debug/plugins/state`` at the end of the run) at most 20%;
* in a scenario with per-request SLOs (``Scenario.slo``): SLO attainment of the admitted requests
  at least 95% (the 429 rejections, the attainment after warm-up and the other routers' attainment
  in the same run are printed beside it: misses before warm-up are mostly the fleet's, not the
  router's);
* across the scenarios of one ``epp-bench routing`` run (:func:`check_predicted_overall`): TTFT p90 at
  most 0.7x the best fixed-weight profile's in at least two scenarios.

Where the default's hit rate misses cache_aware's, an ``INFO`` line says how each spread the prefix
groups (groups, distinct (server, group) pairs, moves of a group between servers): the measured cause
of the working-set gap. A target whose routers were not run is reported as ``SKIP`` with the reason;
nothing is silently left out. Each line is ``PASS|MISS|SKIP <scenario>: <what> (<figures>)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from bench.report import Summary
from bench.scenarios import Scenario, capacity_shares

__all__ = [
    "CACHE_AWARE",
    "DEFAULT_X2",
    "FIXED_WEIGHT",
    "LOAD_ONLY",
    "PICKER",
    "PRECISE",
    "PRECISE_X2",
    "PREDICTED",
    "PREDICTED_PRECISE",
    "PREDICTED_VARIANTS",
    "ROUND_ROBIN",
    "UNSHARED",
    "check",
    "check_predicted_overall",
]

PICKER = "picker-default"
PREDICTED = "picker-predicted"
PREDICTED_PRECISE = "picker-predicted-precise"
PREDICTED_VARIANTS = (PREDICTED, PREDICTED_PRECISE)
"""The predicted-latency profiles held to issue 18's targets (the second: the model's cached tokens from
the precise, KV-event-fed index, ``deploy/configs/predicted-latency-precise.yaml``)."""
FIXED_WEIGHT = (
    "picker-default",
    "picker-tuned",
    "picker-gie-default",
    "picker-load-only",
    "picker-prefix-only",
    "picker-precise",
)
"""The picker profiles with fixed scorer weights, against which the predicted-latency profile is measured."""
SLO_ATTAINMENT = 0.95
MAX_TTFT_MAPE = 0.20
PREDICTED_VS_FIXED = 0.7
PRECISE = "picker-precise"
PRECISE_X2 = "picker-precise-x2"
DEFAULT_X2 = "picker-default-x2"
HASH_VARIANTS = ("picker-default-hash", "picker-precise-hash")  # newPrefixPlacement: hash; -x2 beside
ACTIVE_ACTIVE_POINTS = 0.02  # two replicas' hit rate at most this far below one replica's
CACHE_AWARE = "vllm-router-cache-aware"
ROUND_ROBIN = "envoy-round-robin"
LOAD_ONLY = (
    "envoy-round-robin",
    "envoy-least-request",
    "vllm-router-round-robin",
    "vllm-router-power-of-two",
    "picker-load-only",
)
UNSHARED = ("no-sharing", "large-prompts")
"""Workloads whose prompts share no prefix (no round-robin throughput target there)."""


def _line(ok: bool, scenario: str, what: str, figures: str) -> str:
    return f"{'PASS' if ok else 'MISS'} {scenario}: {what} ({figures})"


def _skip(scenario: str, what: str, missing: str) -> str:
    return f"SKIP {scenario}: {what} (not run: {missing})"


def _ms(v: float) -> str:
    return f"{v * 1000:.0f} ms"


def _placement_why(name: str, pick: Summary, ca: Summary) -> list[str]:
    """Where the default's hit rate trails cache_aware's: how each spread its prefix groups (an INFO line;
    each (server, group) pair beyond one per group is a group's prompt prefilled and cached again)."""
    if not (pick.groups and ca.groups):
        return []
    return [
        f"INFO {name}: why the hit rate trails: {PICKER} served its {pick.groups} groups from "
        f"{pick.group_servers} (server, group) pairs with {pick.group_moves} moves between servers, "
        f"cache_aware its {ca.groups} from {ca.group_servers} with {ca.group_moves} (a move prefills the "
        f"group's prompt again on another server and holds it in two caches)"
    ]


def _vs_cache_aware(name: str, pick: Summary, ca: Summary | None) -> list[str]:
    if ca is None:
        return [_skip(name, "at least as good as vllm-router cache_aware", CACHE_AWARE)]
    hit_ok = pick.hit_rate >= ca.hit_rate - 0.01
    return [
        _line(
            hit_ok,
            name,
            "hit rate at least cache_aware's - 1 pt",
            f"{pick.hit_rate:.1%} vs {ca.hit_rate:.1%}",
        ),
        *([] if hit_ok else _placement_why(name, pick, ca)),
        _line(
            pick.ttft_p50 <= ca.ttft_p50,
            name,
            "TTFT p50 at most cache_aware's",
            f"{_ms(pick.ttft_p50)} vs {_ms(ca.ttft_p50)}",
        ),
        _line(
            pick.ttft_p90 <= ca.ttft_p90,
            name,
            "TTFT p90 at most cache_aware's",
            f"{_ms(pick.ttft_p90)} vs {_ms(ca.ttft_p90)}",
        ),
        _line(
            pick.output_tps >= ca.output_tps,
            name,
            "throughput at least cache_aware's",
            f"{pick.output_tps:.0f} vs {ca.output_tps:.0f} tok/s",
        ),
    ]


def _vs_round_robin(name: str, pick: Summary, rr: Summary | None) -> list[str]:
    if rr is None:
        return [_skip(name, "throughput at least 1.5x round-robin's", ROUND_ROBIN)]
    tput = pick.output_tps / rr.output_tps if rr.output_tps > 0 else math.inf
    return [
        _line(
            tput >= 1.5,
            name,
            "throughput at least 1.5x round-robin's",
            f"{pick.output_tps:.0f} vs {rr.output_tps:.0f} tok/s, {tput:.2f}x",
        )
    ]


def _shared_prefix(name: str, pick: Summary, rr: Summary | None) -> list[str]:
    out = [
        _line(
            pick.hit_vs_oracle >= 0.9,
            name,
            "prefix-cache hit rate at least 90% of the oracle",
            f"{pick.hit_rate:.1%}, {pick.hit_vs_oracle:.0%} of the oracle",
        )
    ]
    if rr is None:
        return [*out, _skip(name, "TTFT p90 at least 10x lower than round-robin", ROUND_ROBIN)]
    ratio = rr.ttft_p90 / pick.ttft_p90 if pick.ttft_p90 > 0 else math.inf
    out.append(
        _line(
            ratio >= 10,
            name,
            "TTFT p90 at least 10x lower than round-robin",
            f"{_ms(pick.ttft_p90)} vs {_ms(rr.ttft_p90)}, {ratio:.1f}x",
        )
    )
    return out


def _no_sharing(name: str, pick: Summary, s: Mapping[str, Summary]) -> list[str]:
    loads = [s[r] for r in LOAD_ONLY if r in s]
    if not loads:
        return [_skip(name, "within 5% of the best load-only router", "a load-only router")]
    best = max(loads, key=lambda x: x.output_tps)
    best_ttft = min(loads, key=lambda x: x.ttft_p90)
    return [
        _line(
            pick.output_tps >= 0.95 * best.output_tps,
            name,
            "output throughput within 5% of the best load-only",
            f"{pick.output_tps:.0f} vs {best.output_tps:.0f} tok/s ({best.router})",
        ),
        _line(
            pick.ttft_p90 <= 1.05 * best_ttft.ttft_p90,
            name,
            "TTFT p90 within 5% of the best load-only",
            f"{_ms(pick.ttft_p90)} vs {_ms(best_ttft.ttft_p90)} ({best_ttft.router})",
        ),
    ]


def _balance(name: str, pick: Summary) -> list[str]:
    return [
        _line(
            pick.share_max_vs_mean <= 1.5,
            name,
            "busiest replica at most 1.5x the mean share",
            f"{pick.share_max_vs_mean:.2f}x the mean, max/min {pick.share_max_min:.2f}",
        ),
        _line(
            not pick.idle_while_queued > 0.05,
            name,
            "no replica idle while another queues (in at most 5% of load samples)",
            f"{pick.idle_while_queued:.0%} of samples",
        ),
    ]


def _capacity_shares(scenario: Scenario, pick: Summary) -> list[str]:
    want = capacity_shares(scenario)
    what = "slower servers get at most their capacity share"
    if len(pick.shares) != len(want):
        return [_skip(scenario.name, what, "per-server request counts")]
    fastest = max(want)
    slow = [
        (i, got, cap) for i, (got, cap) in enumerate(zip(pick.shares, want, strict=True)) if cap < fastest
    ]
    figures = ", ".join(f"server {i}: {got:.1%} (capacity {cap:.1%})" for i, got, cap in slow)
    return [_line(all(got <= cap for _, got, cap in slow), scenario.name, what, figures)]


def check(scenario: Scenario, summaries: Mapping[str, Summary]) -> list[str]:
    """PASS/MISS/SKIP lines for ``scenario`` (see the module docstring)."""
    name = scenario.name
    pick = summaries.get(PICKER)
    extra = [
        line
        for variant in PREDICTED_VARIANTS
        if variant in summaries
        for line in _predicted(scenario, summaries[variant], summaries)
    ]
    extra += _active_active(name, summaries)
    if pick is None:
        return [_skip(name, "every target", PICKER), *extra]
    rr = summaries.get(ROUND_ROBIN)
    out = _vs_cache_aware(name, pick, summaries.get(CACHE_AWARE))
    if scenario.workload not in UNSHARED:
        out += _vs_round_robin(name, pick, rr)
    if name == "shared-prefix":
        out += _shared_prefix(name, pick, rr)
    if name == "no-sharing":
        out += _no_sharing(name, pick, summaries)
    if name in ("few-prefixes", "bursty"):
        out += _balance(name, pick)
    if scenario.server_speeds:
        out += _capacity_shares(scenario, pick)
    precise = summaries.get(PRECISE)
    if precise is not None:
        out += _precise(name, precise, {n: summaries.get(n) for n in (PICKER, CACHE_AWARE)})
    return out + extra


def _best_fixed(summaries: Mapping[str, Summary]) -> Summary | None:
    fixed = [summaries[n] for n in FIXED_WEIGHT if n in summaries and not math.isnan(summaries[n].ttft_p90)]
    return min(fixed, key=lambda x: x.ttft_p90) if fixed else None


def _predicted(scenario: Scenario, pred: Summary, summaries: Mapping[str, Summary]) -> list[str]:
    """The predicted-latency profile's targets in one scenario (see the module docstring)."""
    name, router = scenario.name, pred.router
    out = []
    best = _best_fixed(summaries)
    what = f"{router} TTFT p90 at most 1.05x the best fixed-weight profile's"
    if best is None:
        out.append(_skip(name, what, "a fixed-weight picker profile"))
    else:
        ratio = pred.ttft_p90 / best.ttft_p90 if best.ttft_p90 > 0 else math.inf
        figures = f"{_ms(pred.ttft_p90)} vs {_ms(best.ttft_p90)} ({best.router}), {ratio:.2f}x"
        out.append(_line(ratio <= 1.05, name, what, figures))
    ca = summaries.get(CACHE_AWARE)
    what = f"{router} TTFT p90 at most cache_aware's"
    if ca is None:
        out.append(_skip(name, what, CACHE_AWARE))
    else:
        out.append(
            _line(pred.ttft_p90 <= ca.ttft_p90, name, what, f"{_ms(pred.ttft_p90)} vs {_ms(ca.ttft_p90)}")
        )
    what = f"{router} TTFT median abs % error at most {MAX_TTFT_MAPE:.0%}"
    if math.isnan(pred.ttft_mape):
        out.append(f"SKIP {name}: {what} (the model made no prediction that was then observed)")
    else:
        out.append(
            _line(
                pred.ttft_mape <= MAX_TTFT_MAPE,
                name,
                what,
                f"{pred.ttft_mape:.1%} over the last {pred.ttft_mape_samples} predictions",
            )
        )
    if scenario.slo is not None:
        what = f"{router} SLO attainment of admitted requests at least {SLO_ATTAINMENT:.0%}"
        slo = pred.slo
        if slo is None or not slo.admitted:
            out.append(f"MISS {name}: {what} (no request with an SLO was admitted)")
        else:
            figures = (
                f"{slo.rate:.1%} of {slo.admitted} admitted, tight {slo.tight_rate:.1%}, "
                f"after warm-up {slo.warm_rate:.1%}; "
                f"{slo.rejected} of {slo.requests} rejected with 429"
            )
            others = [
                f"{r} {o.slo.rate:.1%} (after warm-up {o.slo.warm_rate:.1%})"
                for r, o in summaries.items()
                if r != router and o.slo is not None and o.slo.admitted
            ]
            if others:
                figures += "; the others in this run: " + ", ".join(others)
            out.append(_line(slo.rate >= SLO_ATTAINMENT, name, what, figures))
    return out


def check_predicted_overall(per_scenario: Mapping[str, Mapping[str, Summary]]) -> list[str]:
    """The cross-scenario target, per predicted-latency profile that ran (:data:`PREDICTED_VARIANTS`): its
    TTFT p90 at most 0.7x the best fixed-weight profile's in at least two scenarios ([] when none ran)."""
    return [line for variant in PREDICTED_VARIANTS for line in _predicted_overall(variant, per_scenario)]


def _predicted_overall(variant: str, per_scenario: Mapping[str, Mapping[str, Summary]]) -> list[str]:
    ratios: list[tuple[str, float]] = []
    for scenario, summaries in per_scenario.items():
        pred, best = summaries.get(variant), _best_fixed(summaries)
        if pred is not None and best is not None and best.ttft_p90 > 0:
            ratios.append((scenario, pred.ttft_p90 / best.ttft_p90))
    if not ratios and not any(variant in s for s in per_scenario.values()):
        return []
    what = (
        f"{variant} TTFT p90 at most {PREDICTED_VS_FIXED:g}x the best fixed-weight profile's in 2 scenarios"
    )
    figures = ", ".join(f"{n} {r:.2f}x" for n, r in ratios) or "none"
    good = sum(r <= PREDICTED_VS_FIXED for _, r in ratios)
    if good < 2 and len(ratios) < 2:
        return [
            f"SKIP all scenarios: {what} "
            f"(run in {len(ratios)} scenario(s) beside a fixed-weight profile: {figures})"
        ]
    return [_line(good >= 2, "all scenarios", what, f"{good} of {len(ratios)}: {figures}")]


def _active_active(name: str, summaries: Mapping[str, Summary]) -> list[str]:
    """Two picker replicas behind one Envoy against one (see the module docstring)."""
    out = []
    one, two = summaries.get(PRECISE), summaries.get(PRECISE_X2)
    what = f"picker-precise-x2 hit rate at most {ACTIVE_ACTIVE_POINTS * 100:g} points below picker-precise's"
    if two is not None:
        if one is None:
            out.append(_skip(name, what, PRECISE))
        else:
            delta = (two.hit_rate - one.hit_rate) * 100
            figures = f"{two.hit_rate:.1%} vs {one.hit_rate:.1%}, {delta:+.1f} points"
            out.append(_line(two.hit_rate >= one.hit_rate - ACTIVE_ACTIVE_POINTS, name, what, figures))
    d1, d2 = summaries.get(PICKER), summaries.get(DEFAULT_X2)
    if d1 is not None and d2 is not None:
        out.append(
            f"INFO {name}: picker-default-x2 (approximate, two replicas) hit rate {d2.hit_rate:.1%} vs "
            f"{d1.hit_rate:.1%} with one, {(d2.hit_rate - d1.hit_rate) * 100:+.1f} points; TTFT p90 "
            f"{_ms(d2.ttft_p90)} vs {_ms(d1.ttft_p90)}"
        )
    for single in (PRECISE, PICKER):  # replica sync (--replica-sync-port): the target with it
        one, synced = summaries.get(single), summaries.get(f"{single}-sync-x2")
        if synced is not None and one is not None:
            delta = (synced.hit_rate - one.hit_rate) * 100
            out.append(
                _line(
                    synced.hit_rate >= one.hit_rate - ACTIVE_ACTIVE_POINTS,
                    name,
                    f"{single}-sync-x2 (two replicas with replica sync) hit rate at most "
                    f"{ACTIVE_ACTIVE_POINTS * 100:g} points below {single}'s",
                    f"{synced.hit_rate:.1%} vs {one.hit_rate:.1%}, {delta:+.1f} points; TTFT p90 "
                    f"{_ms(synced.ttft_p90)} vs {_ms(one.ttft_p90)}",
                )
            )
    for single in HASH_VARIANTS:
        h1, h2 = summaries.get(single), summaries.get(f"{single}-x2")
        if h1 is not None and h2 is not None:
            out.append(
                f"INFO {name}: {single}-x2 (newPrefixPlacement: hash, two replicas) hit rate "
                f"{h2.hit_rate:.1%} vs {h1.hit_rate:.1%} with one, {(h2.hit_rate - h1.hit_rate) * 100:+.1f} "
                f"points; TTFT p90 {_ms(h2.ttft_p90)} vs {_ms(h1.ttft_p90)}"
            )
    return out


def _precise(name: str, precise: Summary, peers: Mapping[str, Summary | None]) -> list[str]:
    """The exact prefix profile: hit rate at least, TTFT p90 at most, the approximate default's and
    cache_aware's (issue 14's targets)."""
    out = []
    for peer, summary in peers.items():
        if summary is None:
            out.append(_skip(name, f"picker-precise at least as good as {peer}", peer))
            continue
        out.append(
            _line(
                precise.hit_rate >= summary.hit_rate,
                name,
                f"picker-precise hit rate at least {peer}'s",
                f"{precise.hit_rate:.1%} vs {summary.hit_rate:.1%}",
            )
        )
        out.append(
            _line(
                precise.ttft_p90 <= summary.ttft_p90,
                name,
                f"picker-precise TTFT p90 at most {peer}'s",
                f"{_ms(precise.ttft_p90)} vs {_ms(summary.ttft_p90)}",
            )
        )
    return out
