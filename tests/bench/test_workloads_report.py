"""Unit tests of the benchmark harness's pure parts: workloads, oracle, summaries, report."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from bench.report import RouterRun, histogram_quantile, summarize, write_report
from simulator.loadgen import RequestResult
from simulator.workloads import WorkloadParams, arrival_times, build_workload, oracle_hit_rate, percentile


@pytest.mark.parametrize("name", ["shared-prefix", "few-prefixes", "no-sharing", "multi-turn", "lora-mix"])
def test_workloads_are_deterministic(name: str) -> None:
    p = WorkloadParams(groups=4, prompts_per_group=3, sessions=3, turns=2, requests=10, system_tokens=50)
    a, b = build_workload(name, p), build_workload(name, p)
    assert a.requests == b.requests
    assert a.requests != build_workload(name, replace(p, seed=7)).requests


def test_shared_prefix_shape() -> None:
    p = WorkloadParams(groups=3, prompts_per_group=4, system_tokens=40, question_tokens=5)
    w = build_workload("shared-prefix", p)
    assert len(w.requests) == 12
    by_group: dict[str, set[str]] = {}
    for r in w.requests:
        by_group.setdefault(r.group, set()).add(r.prompt_text.split("\n\n")[0])
        assert len(r.prompt_text.split("\n\n")[0].split()) == 40
    assert all(len(systems) == 1 for systems in by_group.values())
    assert [r.at for r in w.requests] == sorted(r.at for r in w.requests)


def test_multi_turn_extends_conversations() -> None:
    w = build_workload("multi-turn", WorkloadParams(sessions=2, turns=3, system_tokens=10))
    by_session: dict[str, list[int]] = {}
    for r in w.requests:
        by_session.setdefault(r.session, []).append(len(r.body["messages"]))
    assert all(lengths == [2, 4, 6] for lengths in by_session.values())


def test_arrival_processes() -> None:
    import random

    const = arrival_times(5, WorkloadParams(rate=10, arrival="constant"), random.Random(1))
    assert const == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    bursts = arrival_times(2000, WorkloadParams(rate=10, arrival="bursts"), random.Random(1))
    poisson = arrival_times(2000, WorkloadParams(rate=10, arrival="poisson"), random.Random(1))
    assert bursts[-1] < poisson[-1]  # bursts add load on top of the base rate
    with pytest.raises(ValueError, match="arrival must be"):
        arrival_times(3, WorkloadParams(arrival="sometimes"), random.Random(1))


def test_oracle_hit_rate_counts_whole_prefix_blocks() -> None:
    a = list(range(32))  # two blocks of 16
    b = list(range(16)) + list(range(100, 116))  # shares only the first block
    assert oracle_hit_rate([a], 16) == 0.0
    assert oracle_hit_rate([a, a], 16) == pytest.approx(32 / 64)
    assert oracle_hit_rate([a, b], 16) == pytest.approx(16 / 64)
    # a block equal to an earlier one but after a different prefix is not a hit
    c = list(range(100, 116)) + list(range(16))
    assert oracle_hit_rate([a, c], 16) == 0.0
    # partial blocks never hit
    assert oracle_hit_rate([a[:15], a[:15]], 16) == 0.0


def test_histogram_quantile_interpolates() -> None:
    buckets = [(0.001, 50.0), (0.002, 90.0), (0.004, 100.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.001)
    assert histogram_quantile(0.7, buckets) == pytest.approx(0.0015)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.0038)
    assert math.isnan(histogram_quantile(0.5, []))


def test_summary_and_report(tmp_path: Path) -> None:
    results = [
        RequestResult(index=i, group="g", sent_at=0, status=200, ttft=0.01 * (i + 1), e2e=0.1,
                      itl=[0.01, 0.02], output_tokens=10, server=str(8000 + i % 2))
        for i in range(10)
    ] + [RequestResult(index=10, group="g", sent_at=0, status=503, error="no endpoint")]  # fmt: skip
    run = RouterRun(router="picker", scenario="shared-prefix", results=results, duration_s=2.0,
                    prefix_hits=60, prefix_queries=100, oracle_hit_rate=0.8, picker_cpu_s=0.011,
                    timeline=[(0.0, {"8000": 1, "8001": 2}), (1.0, {"8000": 3, "8001": 0})])  # fmt: skip
    s = summarize(run)
    assert s.errors == 1 and s.requests == 11
    assert s.ttft_p50 == pytest.approx(0.05)
    assert s.output_tps == pytest.approx(50.0)
    assert s.hit_rate == pytest.approx(0.6) and s.hit_vs_oracle == pytest.approx(0.75)
    assert s.share_max_min == pytest.approx(1.0)
    assert s.cpu_s_per_1k == pytest.approx(1.0)
    path = write_report(tmp_path, {"shared-prefix": [run]}, checks={"shared-prefix": ["PASS something"]})
    text = path.read_text()
    assert "| picker |" in text and "PASS something" in text
    assert (tmp_path / "shared-prefix-ttft-cdf.png").stat().st_size > 1000
    assert (tmp_path / "shared-prefix-picker-load.png").exists()
    assert percentile([3, 1, 2], 50) == 2
