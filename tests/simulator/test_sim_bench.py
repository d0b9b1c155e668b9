"""Smoke test of the simulator benchmark (tiny, so it stays fast; the figures are not asserted)."""

from __future__ import annotations

import pytest

from bench.simulator_bench import main, run_scenario, run_scrape, time_metrics_render

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("scenario", ["realtime", "max"])
def test_scenario_streams_and_reports(scenario: str) -> None:
    result = run_scenario(scenario, servers=2, concurrency=3, seconds=0.6, max_tokens=4)
    assert result.errors == 0
    # a request counts when its last token lands in the window, so tokens >= requests
    assert result.requests_per_s > 0 and result.tokens_per_s >= result.requests_per_s
    assert result.sim_cpu_cores >= 0  # /proc CPU ticks are 10 ms coarse


def test_bad_arguments_exit_2() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--servers", "0"])
    assert exc.value.code == 2


def test_metrics_render_timing_runs() -> None:
    ours, theirs = time_metrics_render(iterations=5)
    assert ours > 0 and theirs > 0


def test_scrape_scenario_reports_cost() -> None:
    figures = run_scrape(servers=2, seconds=0.5, interval=0.05)
    assert figures["scrapes_per_s"] > 0 and figures["sim_cpu_cores"] >= 0  # CPU ticks are 10 ms coarse
