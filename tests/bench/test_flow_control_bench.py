"""epp-bench flow-control: the verdicts from figures, and the in-process CPU measurement."""

from __future__ import annotations

from bench.flow_control_bench import _config
from bench.flow_control_cpu import cpu_per_request
from bench.flow_control_report import Mode, Tally, report
from epp.config.sections import load_picker_config
from scheduler.plugins.flowcontrol.fair_share import FairShareFairness


def tally(ttft_ms: float, ok: int = 10, rejected: int = 0, lost: int = 0) -> Tally:
    return Tally([ttft_ms / 1e3] * 10, ok, rejected, lost)


def mode(b_noisy: float, crit: float, sat: float, ok: int, shed: int = 0, lost: int = 0) -> Mode:
    return Mode(
        solo_b=tally(40),
        noisy={"a": tally(500, ok=ok), "b": tally(b_noisy)},
        solo_critical=tally(40),
        overload={"critical": tally(crit), "sheddable": tally(300, rejected=shed, lost=lost)},
        saturated=tally(sat, ok=ok),
        seconds=1.0,
    )


def verdicts(lines: list[str]) -> list[str]:
    return [line.rsplit(" ", 1)[1] for line in lines if line.endswith(("PASS", "MISS"))]


def test_verdicts() -> None:
    off = mode(b_noisy=900, crit=400, sat=300, ok=50, shed=5)
    on = mode(b_noisy=50, crit=45, sat=290, ok=50, shed=9)
    on.noisy["b"].queue_wait, on.noisy["a"].queue_wait = 0.012, 0.4
    good = report(off, on)
    assert verdicts(good) == ["PASS"] * 5
    bad = report(off, mode(b_noisy=90, crit=80, sat=400, ok=30, shed=0, lost=1))
    assert verdicts(bad) == ["MISS"] * 5
    assert "B TTFT p90 solo 40 ms" in good[0] and "on 50 ms, off 900 ms" in good[0]
    assert "A's throughput with B, flow control on 50.0 / off 50.0 req/s (+0%)" in good[1]
    assert "B's 10.0 / 10.0; both 60.0 / 60.0 req/s (+0%)" in good[1]
    assert "queue with flow control: B 12 ms, A 400 ms" in good[2]
    assert "critical n/a" in bad[4]  # no queue-wait figure (nothing counted)


def test_the_tenant_band_uses_the_fair_share_policy_with_the_light_tenants_reserve() -> None:
    loaded = load_picker_config(None, _config(4, True, 0.25), source="bench")
    assert loaded.flow_control is not None
    fairness = loaded.flow_control.band(0).fairness
    assert isinstance(fairness, FairShareFairness) and fairness.params.reserve == 0.25


def test_cpu_measurement_runs_the_controller() -> None:
    fast, queued = cpu_per_request(300)
    assert 0 < fast < 10_000 and 0 < queued < 10_000
    fast, queued = cpu_per_request(300, fair_share=True)
    assert 0 < fast < 10_000 and 0 < queued < 10_000
