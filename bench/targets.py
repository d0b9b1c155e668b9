"""The issue's routing targets as PASS/MISS lines, computed from the summaries of one run.

* shared-prefix, ``picker-default`` vs ``envoy-round-robin``: TTFT p90 at least 10x lower, output
  throughput at least 1.5x higher, server-side hit rate at least 90% of the oracle; vs
  ``vllm-router-cache-aware``: TTFT p90 and hit rate at least as good.
* no-sharing: ``picker-default`` output throughput within 10% of the best load-only router
  (:data:`LOAD_ONLY`) and TTFT p90 at most 1.1x of that router's.
* few-prefixes and bursty, ``picker-default``: the busiest replica gets at most 1.5x the mean share
  of requests, and in at most 5% of the load samples a replica sits idle while another queues.

A target whose routers were not run is reported as ``SKIP`` with the reason; nothing is silently left
out. Each line is ``PASS|MISS|SKIP <scenario>: <what> (<figures>)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from bench.report import Summary

__all__ = ["LOAD_ONLY", "PICKER", "check"]

PICKER = "picker-default"
LOAD_ONLY = (
    "envoy-round-robin",
    "envoy-least-request",
    "vllm-router-round-robin",
    "vllm-router-power-of-two",
    "picker-load-only",
)


def _line(ok: bool, scenario: str, what: str, figures: str) -> str:
    return f"{'PASS' if ok else 'MISS'} {scenario}: {what} ({figures})"


def _skip(scenario: str, what: str, missing: str) -> str:
    return f"SKIP {scenario}: {what} (not run: {missing})"


def _shared_prefix(s: Mapping[str, Summary]) -> list[str]:
    name = "shared-prefix"
    out: list[str] = []
    pick, rr, ca = s.get(PICKER), s.get("envoy-round-robin"), s.get("vllm-router-cache-aware")
    if pick is None or rr is None:
        return [_skip(name, "picker vs round-robin targets", f"{PICKER} and envoy-round-robin")]
    ratio = rr.ttft_p90 / pick.ttft_p90 if pick.ttft_p90 > 0 else math.inf
    out.append(
        _line(
            ratio >= 10,
            name,
            "TTFT p90 at least 10x lower than round-robin",
            f"{pick.ttft_p90 * 1000:.0f} ms vs {rr.ttft_p90 * 1000:.0f} ms, {ratio:.1f}x",
        )
    )
    tput = pick.output_tps / rr.output_tps if rr.output_tps > 0 else math.inf
    out.append(
        _line(
            tput >= 1.5,
            name,
            "output throughput at least 1.5x round-robin's",
            f"{pick.output_tps:.0f} vs {rr.output_tps:.0f} tok/s, {tput:.2f}x",
        )
    )
    out.append(
        _line(
            pick.hit_vs_oracle >= 0.9,
            name,
            "prefix-cache hit rate at least 90% of the oracle",
            f"{pick.hit_rate:.1%}, {pick.hit_vs_oracle:.0%} of the oracle",
        )
    )
    if ca is None:
        out.append(_skip(name, "at least as good as vllm-router cache_aware", "vllm-router-cache-aware"))
        return out
    out.append(
        _line(
            pick.ttft_p90 <= ca.ttft_p90,
            name,
            "TTFT p90 at most vllm-router cache_aware's",
            f"{pick.ttft_p90 * 1000:.0f} ms vs {ca.ttft_p90 * 1000:.0f} ms",
        )
    )
    out.append(
        _line(
            pick.hit_rate >= ca.hit_rate,
            name,
            "hit rate at least vllm-router cache_aware's",
            f"{pick.hit_rate:.1%} vs {ca.hit_rate:.1%}",
        )
    )
    return out


def _no_sharing(s: Mapping[str, Summary]) -> list[str]:
    name = "no-sharing"
    pick = s.get(PICKER)
    loads = [s[r] for r in LOAD_ONLY if r in s]
    if pick is None or not loads:
        return [_skip(name, "within 10% of the best load-only router", f"{PICKER} and a load-only router")]
    best = max(loads, key=lambda x: x.output_tps)
    best_ttft = min(loads, key=lambda x: x.ttft_p90)
    return [
        _line(
            pick.output_tps >= 0.9 * best.output_tps,
            name,
            "output throughput within 10% of the best load-only",
            f"{pick.output_tps:.0f} vs {best.output_tps:.0f} tok/s ({best.router})",
        ),
        _line(
            pick.ttft_p90 <= 1.1 * best_ttft.ttft_p90,
            name,
            "TTFT p90 within 10% of the best load-only",
            f"{pick.ttft_p90 * 1000:.0f} ms vs {best_ttft.ttft_p90 * 1000:.0f} ms ({best_ttft.router})",
        ),
    ]


def _balance(name: str, s: Mapping[str, Summary]) -> list[str]:
    pick = s.get(PICKER)
    if pick is None:
        return [_skip(name, "busiest replica at most 1.5x the mean share", PICKER)]
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


def check(scenario: str, summaries: Mapping[str, Summary]) -> list[str]:
    """PASS/MISS/SKIP lines for ``scenario`` (none for scenarios without targets)."""
    if scenario == "shared-prefix":
        return _shared_prefix(summaries)
    if scenario == "no-sharing":
        return _no_sharing(summaries)
    if scenario in ("few-prefixes", "bursty"):
        return _balance(scenario, summaries)
    return []
