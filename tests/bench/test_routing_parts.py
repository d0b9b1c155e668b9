"""Unit tests of the routing benchmark's pure parts: metric parsing, CPU time, oracle, targets."""

from __future__ import annotations

import math
import os

import pytest

from bench.metrics_scrape import bucket_delta, histogram_buckets, parse_server, proc_cpu_seconds
from bench.oracle import workload_oracle
from bench.report import Summary
from bench.routers import ROUTERS
from bench.scenarios import SCENARIOS, sim_args, smoke
from bench.targets import check
from simulator.workloads import RequestSpec

SERVER = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
vllm:num_requests_waiting{model_name="m"} 2.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="m"} 160.0
vllm:prefix_cache_hits_total{model_name="lora"} 32.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="m"} 400.0
"""

PICKER = """\
# TYPE inference_extension_scheduler_e2e_duration_seconds histogram
inference_extension_scheduler_e2e_duration_seconds_bucket{le="0.0001"} 1.0
inference_extension_scheduler_e2e_duration_seconds_bucket{le="0.001"} 5.0
inference_extension_scheduler_e2e_duration_seconds_bucket{le="+Inf"} 6.0
inference_extension_scheduler_e2e_duration_seconds_count 6.0
inference_extension_scheduler_e2e_duration_seconds_sum 0.004
"""


def test_parse_server_sums_label_sets() -> None:
    c = parse_server(SERVER)
    assert (c.prefix_hits, c.prefix_queries, c.load) == (192.0, 400.0, 5)


def test_histogram_buckets_and_delta() -> None:
    after = histogram_buckets(PICKER)
    assert after == [(0.0001, 1.0), (0.001, 5.0), (math.inf, 6.0)]
    assert bucket_delta([(0.0001, 1.0), (0.001, 2.0), (math.inf, 2.0)], after) == [
        (0.0001, 0.0),
        (0.001, 3.0),
        (math.inf, 4.0),
    ]


def test_proc_cpu_seconds_reads_utime_and_stime_after_the_command_name() -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 10 + [str(3 * ticks), str(ticks)] + ["0"] * 30
    stat = "123 (python -m (epp)) " + " ".join(fields)
    assert proc_cpu_seconds(123, read=lambda _path: stat) == pytest.approx(4.0)
    assert proc_cpu_seconds(os.getpid()) >= 0.0


def _spec(i: int, prompt: str, model: str = "base") -> RequestSpec:
    return RequestSpec(index=i, at=0.0, path="/v1/completions", body={"model": model, "prompt": prompt})


def test_oracle_uses_the_simulator_tokenizer_and_salts_adapters() -> None:
    text = " ".join(f"w{i}" for i in range(32))  # 32 tokens: two blocks of 16
    assert workload_oracle([_spec(0, text), _spec(1, text)], 16, "base") == pytest.approx(0.5)
    assert workload_oracle([_spec(0, text), _spec(1, text, "lora")], 16, "base") == 0.0


def _summary(router: str, **kw: float) -> Summary:
    base = dict.fromkeys(Summary.__slots__, math.nan)
    base.update(router=router, requests=100, errors=0, groups=0, group_servers=0, group_moves=0)
    base.update(kw)
    return Summary(**base)  # type: ignore[arg-type]


def _kinds(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines]


def test_every_scenario_is_checked_against_cache_aware_and_round_robin() -> None:
    pick = _summary(
        "picker-default", ttft_p50=0.03, ttft_p90=0.1, output_tps=300, hit_rate=0.9, hit_vs_oracle=0.95
    )
    rr = _summary("envoy-round-robin", ttft_p50=1.0, ttft_p90=2.0, output_tps=150, hit_rate=0.3)
    ca = _summary("vllm-router-cache-aware", ttft_p50=0.04, ttft_p90=0.05, output_tps=300, hit_rate=0.905)
    runs = {s.router: s for s in (pick, rr, ca)}
    lines = check(SCENARIOS["multi-turn"], runs)
    # hit within 1 pt PASS, p50 lower PASS, p90 higher MISS, throughput equal PASS, 2x round-robin PASS
    assert _kinds(lines) == ["PASS", "PASS", "MISS", "PASS", "PASS"], lines
    worse = _summary("picker-default", ttft_p50=0.05, ttft_p90=0.1, output_tps=240, hit_rate=0.89)
    assert _kinds(check(SCENARIOS["saturated"], {**runs, "picker-default": worse})) == ["MISS"] * 4 + ["PASS"]
    shared = check(SCENARIOS["shared-prefix"], runs)
    assert _kinds(shared) == ["PASS", "PASS", "MISS", "PASS", "PASS", "PASS", "PASS"], shared
    assert _kinds(check(SCENARIOS["shared-prefix"], {"picker-default": pick}))[0] == "SKIP"
    assert _kinds(check(SCENARIOS["multi-turn"], {"envoy-round-robin": rr})) == ["SKIP"]


def test_balance_no_sharing_and_capacity_share_targets() -> None:
    hot = _summary("picker-default", share_max_vs_mean=1.8, share_max_min=4.0)
    assert _kinds(check(SCENARIOS["few-prefixes"], {"picker-default": hot}))[-2:] == ["MISS", "PASS"]
    pick = _summary("picker-default", output_tps=96, ttft_p90=1.04)
    lr = _summary("envoy-least-request", output_tps=100, ttft_p90=1.0)
    lines = check(SCENARIOS["no-sharing"], {s.router: s for s in (pick, lr)})
    assert _kinds(lines) == ["SKIP", "PASS", "PASS"], lines  # no round-robin line: nothing is shared
    slow = _summary("picker-default")
    hetero = SCENARIOS["heterogeneous"]
    ok = Summary(**{**{k: getattr(slow, k) for k in Summary.__slots__}, "shares": (0.14, 0.29, 0.29, 0.28)})
    bad = Summary(**{**{k: getattr(slow, k) for k in Summary.__slots__}, "shares": (0.25, 0.25, 0.25, 0.25)})
    assert _kinds(check(hetero, {"picker-default": ok}))[-1] == "PASS"
    assert _kinds(check(hetero, {"picker-default": bad}))[-1] == "MISS"
    assert "server 0: 25.0% (capacity 14.3%)" in check(hetero, {"picker-default": bad})[-1]


def test_scenarios_name_known_routers_and_smoke_shrinks() -> None:
    for s in SCENARIOS.values():
        assert set(s.routers) <= set(ROUTERS)
        assert sim_args(s)[:2] == ["--model", "sim-model"]
    small = smoke(SCENARIOS["shared-prefix"])
    assert small.params.groups * small.params.prompts_per_group < 100
    assert small.time_scale > SCENARIOS["shared-prefix"].time_scale


def test_shares_count_idle_replicas_and_idle_while_queued() -> None:
    from bench.report import RouterRun, summarize
    from simulator.loadgen import RequestResult

    results = [RequestResult(index=i, group="g", sent_at=0.0, status=200, ttft=0.1, e2e=0.2, server="a")
               for i in range(4)]  # fmt: skip
    run = RouterRun(router="r", scenario="s", results=results, duration_s=1.0, servers=["a", "b"],
                    timeline=[(0.0, {"a": 20, "b": 0}), (0.5, {"a": 3, "b": 2})])  # fmt: skip
    s = summarize(run)
    assert s.share_max_min == math.inf
    assert s.share_max_vs_mean == pytest.approx(2.0)
    assert s.idle_while_queued == pytest.approx(0.5)


def test_summaries_count_how_the_groups_were_spread() -> None:
    from bench.report import RouterRun, summarize
    from simulator.loadgen import RequestResult

    served = [("g1", "a"), ("g2", "b"), ("g1", "b"), ("g1", "a"), ("g2", "b"), ("", "a"), ("g3", "")]
    results = [RequestResult(index=i, group=g, sent_at=float(i), status=200, ttft=0.1, e2e=0.2, server=srv)
               for i, (g, srv) in enumerate(served)]  # fmt: skip
    results.append(
        RequestResult(index=9, group="g2", sent_at=2.5, status=500, server="a")
    )  # failed: not counted
    s = summarize(RouterRun(router="r", scenario="s", results=results, duration_s=1.0, servers=["a", "b"]))
    assert (s.groups, s.group_servers, s.group_moves) == (2, 3, 2)  # g1: a -> b -> a; g2 stays on b


def test_a_hit_rate_miss_says_how_each_router_spread_the_groups() -> None:
    spread = {"ttft_p90": 0.2, "groups": 24}
    ca = _summary("vllm-router-cache-aware", hit_rate=0.42, group_servers=24, group_moves=0, **spread)
    behind = _summary("picker-default", hit_rate=0.35, group_servers=31, group_moves=14, **spread)
    close = _summary("picker-default", hit_rate=0.415, group_servers=26, group_moves=3, **spread)
    lines = check(SCENARIOS["working-set"], {s.router: s for s in (ca, behind)})
    why = [ln for ln in lines if ln.startswith("INFO working-set: why the hit rate trails")]
    assert len(why) == 1
    assert "its 24 groups from 31 (server, group) pairs with 14 moves" in why[0]
    assert "cache_aware its 24 from 24 with 0" in why[0]
    assert not [
        ln for ln in check(SCENARIOS["working-set"], {s.router: s for s in (ca, close)}) if "why" in ln
    ]


def test_active_active_hit_rate_target_and_the_approximate_profiles_change() -> None:
    one = _summary("picker-precise", ttft_p90=0.2, hit_rate=0.80)
    close = _summary("picker-precise-x2", ttft_p90=0.2, hit_rate=0.785)
    far = _summary("picker-precise-x2", ttft_p90=0.2, hit_rate=0.75)
    d1 = _summary("picker-default", ttft_p90=0.2, hit_rate=0.70)
    d2 = _summary("picker-default-x2", ttft_p90=0.3, hit_rate=0.62)

    def x2(lines: list[str]) -> list[str]:
        return [ln for ln in lines if "-x2" in ln]

    ok = x2(check(SCENARIOS["working-set"], {s.router: s for s in (one, close, d1, d2)}))
    assert _kinds(ok) == ["PASS", "INFO"] and "-1.5 points" in ok[0] and "-8.0 points" in ok[1], ok
    assert _kinds(x2(check(SCENARIOS["working-set"], {s.router: s for s in (one, far)}))) == ["MISS"]
    assert _kinds(x2(check(SCENARIOS["working-set"], {"picker-precise-x2": far}))) == ["SKIP"]


def test_active_active_prints_each_hash_variants_change() -> None:
    runs = [
        _summary("picker-default-hash", ttft_p90=0.2, hit_rate=0.40),
        _summary("picker-default-hash-x2", ttft_p90=0.3, hit_rate=0.37),
        _summary("picker-precise-hash", ttft_p90=0.2, hit_rate=0.35),
    ]
    lines = [ln for ln in check(SCENARIOS["working-set"], {s.router: s for s in runs}) if "-x2" in ln]
    assert _kinds(lines) == ["INFO"] and "picker-default-hash-x2" in lines[0] and "-3.0 points" in lines[0]


def test_the_slow_note_names_slow_endpoints_and_diverted_prefixes() -> None:
    from bench.routing import _slow_note

    state = {
        "speeds": {
            "slow": ["10.0.0.1:8000"],
            "relative_speed": {"10.0.0.1:8000": 0.48, "10.0.0.2:8000": 1.0},
        },
        "diverted": {"10.0.0.1:8000": 2},
        "diversions": 3,
    }
    assert _slow_note("affinity", state) == (
        "affinity: slow endpoints: 10.0.0.1:8000 at 0.48 of the fastest; "
        "prefixes diverted: 2 off 10.0.0.1:8000 (3 in all)"
    )
    recovered = {"speeds": {"slow": [], "relative_speed": {}}, "diverted": {}, "diversions": 1}
    assert _slow_note("affinity", recovered).endswith(
        "slow endpoints: none now; prefixes diverted: none now (1 in all)"
    )
    quiet = {"speeds": {"slow": [], "relative_speed": {"10.0.0.2:8000": 1.0}}, "diverted": {}}
    assert _slow_note("affinity", quiet) == ""  # an equal fleet: no note
    assert _slow_note("latency", {"model": {}}) == ""  # another plugin's state
