"""Unit tests of the routing benchmark's SLO scenario and predicted-latency targets: the per-request SLO
headers, their attainment, the model-error read-out and the PASS/MISS/SKIP lines."""

from __future__ import annotations

import argparse
import asyncio
import math
from dataclasses import replace
from typing import Any

import httpx
import pytest
from aiohttp import web

from bench.report import RouterRun, Summary, summarize, write_report
from bench.routers import ROUTERS
from bench.routing import _read_plugin_state, _scenarios, _workload
from bench.scenarios import SCENARIOS
from bench.slo import OBJECTIVE_HEADER, TPOT_HEADER, TTFT_HEADER, SloMix, apply_slo, attainment, slo_targets
from bench.targets import check, check_predicted_overall
from simulator.loadgen import LoadOptions, RequestResult, run_load
from simulator.workloads import WorkloadParams, build_workload

MIX = SloMix(tight_ttft_ms=200, loose_ttft_ms=2000, tight_fraction=0.3, tpot_ms=50, sheddable_fraction=0.5)


def _workload_with_slo(n: int = 200) -> Any:
    w = build_workload("no-sharing", WorkloadParams(requests=n, system_tokens=10, question_tokens=5))
    return apply_slo(w, MIX)


def test_apply_slo_adds_seeded_headers_in_the_given_proportions() -> None:
    w = _workload_with_slo()
    assert w.requests == _workload_with_slo().requests  # deterministic
    heads = [dict(s.headers) for s in w.requests]
    tight = sum(h[TTFT_HEADER] == "200" for h in heads)
    assert all(h[TTFT_HEADER] in ("200", "2000") and h[TPOT_HEADER] == "50" for h in heads)
    assert 40 <= tight <= 80  # 30% of 200
    assert 70 <= sum(OBJECTIVE_HEADER in h for h in heads) <= 130
    targets = slo_targets(w)
    assert len(targets) == 200 and set(targets.values()) == {(200.0, 50.0), (2000.0, 50.0)}
    assert [s.body for s in w.requests] == [s.body for s in build_workload(w.name, w.params).requests]
    assert slo_targets(build_workload(w.name, w.params)) == {}


@pytest.mark.parametrize(
    "kw",
    [
        {"tight_ttft_ms": 0, "loose_ttft_ms": 10},
        {"tight_ttft_ms": 20, "loose_ttft_ms": 10},
        {"tight_ttft_ms": 1, "loose_ttft_ms": 10, "tight_fraction": 1.5},
        {"tight_ttft_ms": 1, "loose_ttft_ms": 10, "tpot_ms": -1},
    ],
)
def test_slo_mix_rejects_bad_values(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="SloMix"):
        SloMix(**kw)


def _result(
    i: int, status: int = 200, ttft: float | None = 0.1, itl: tuple[float, ...] = ()
) -> RequestResult:
    return RequestResult(index=i, group="g", sent_at=0.0, status=status, ttft=ttft, e2e=0.5, itl=list(itl))


def test_attainment_counts_admitted_met_and_rejected() -> None:
    slos = {
        0: (200.0, 0.0),
        1: (200.0, 0.0),
        2: (2000.0, 0.0),
        3: (2000.0, 20.0),
        4: (200.0, 0.0),
        5: (200.0, 0.0),
    }
    results = [
        _result(0, ttft=0.15),  # tight, met
        _result(1, ttft=0.25),  # tight, missed
        _result(2, ttft=1.5),  # loose, met
        _result(3, ttft=0.1, itl=(0.03, 0.03)),  # TPOT 30 ms > 20 ms: missed
        _result(4, status=429, ttft=None),  # rejected
        _result(5, status=503, ttft=None),  # failed: neither admitted nor rejected
        _result(6, ttft=9.0),  # no SLO: not counted
    ]
    a = attainment(results, slos)
    assert (a.requests, a.admitted, a.met, a.rejected) == (6, 4, 2, 1)
    assert a.rate == 0.5 and (a.tight_admitted, a.tight_met) == (2, 1)
    assert a.warm_admitted == 0 and math.isnan(a.warm_rate)  # every index is below the default warm-up
    warm = attainment(results, slos, warmup=2)  # indices 2, 3 admitted; 2 met
    assert (warm.warm_admitted, warm.warm_met, warm.warm_rate) == (2, 1, 0.5)
    assert math.isnan(attainment([], slos).rate)


def _summary(router: str, **kw: Any) -> Summary:
    base: dict[str, Any] = dict.fromkeys(Summary.__slots__, math.nan)
    base.update(router=router, requests=100, errors=0, slo=None, ttft_mape_samples=0, shares=())
    base.update(kw)
    return Summary(**base)


def _kinds(lines: list[str]) -> list[str]:
    return [line.split()[0] for line in lines]


def test_summarize_carries_slo_attainment_and_model_error() -> None:
    run = RouterRun("picker-predicted", "slo", [_result(0, ttft=0.1), _result(1, status=429, ttft=None)], 1.0)
    assert summarize(run).slo is None
    run.slos = {0: (200.0, 0.0), 1: (200.0, 0.0)}
    run.ttft_mape, run.ttft_mape_samples = 0.12, 180
    s = summarize(run)
    assert s.slo is not None and (s.slo.admitted, s.slo.rejected, s.slo.rate) == (1, 1, 1.0)
    assert (s.ttft_mape, s.ttft_mape_samples) == (0.12, 180)


def test_predicted_targets_in_the_slo_scenario() -> None:
    scenario = SCENARIOS["slo"]
    good = attainment([_result(i, ttft=0.1) for i in range(20)], {i: (200.0, 0.0) for i in range(20)})
    pred = _summary("picker-predicted", ttft_p90=0.5, ttft_mape=0.15, ttft_mape_samples=200, slo=good)
    fixed = _summary("picker-default", ttft_p90=1.0)
    tuned = _summary("picker-tuned", ttft_p90=0.48)
    ca = _summary("vllm-router-cache-aware", ttft_p90=0.4)
    lines = check(scenario, {s.router: s for s in (pred, fixed, tuned, ca)})
    mine = [line for line in lines if "picker-predicted" in line]
    # p90 within 1.05x of the best fixed (picker-tuned) PASS, vs cache_aware MISS, error PASS, SLO PASS
    assert _kinds(mine) == ["PASS", "MISS", "PASS", "PASS"], mine
    assert "(picker-tuned), 1.04x" in mine[0] and "15.0% over the last 200" in mine[2]
    bad = attainment(
        [_result(i, ttft=0.1 if i < 18 else 0.3) for i in range(20)] + [_result(20, status=429, ttft=None)],
        {i: (200.0, 0.0) for i in range(21)},
    )
    worse = replace(pred, ttft_p90=0.6, ttft_mape=0.3, slo=bad)
    mine = [line for line in check(scenario, {"picker-predicted": worse}) if "picker-predicted" in line]
    assert _kinds(mine) == ["SKIP", "SKIP", "MISS", "MISS"], mine
    assert "90.0% of 20 admitted" in mine[3] and "1 of 21 rejected with 429" in mine[3]
    assert "the others in this run" not in mine[3]
    beside = check(scenario, {"picker-predicted": worse, "picker-default": replace(fixed, slo=good)})
    slo_line = next(line for line in beside if "SLO attainment" in line)
    assert "the others in this run: picker-default 100.0% (after warm-up" in slo_line, slo_line
    # outside an SLO scenario: no attainment line; without a model error: SKIP
    hetero = check(SCENARIOS["heterogeneous"], {"picker-predicted": replace(pred, ttft_mape=math.nan)})
    assert _kinds([line for line in hetero if "picker-predicted" in line]) == ["SKIP", "SKIP", "SKIP"]


def test_predicted_against_the_best_fixed_profile_across_scenarios() -> None:
    def runs(pred_p90: float, fixed_p90: float) -> dict[str, Summary]:
        return {
            "picker-predicted": _summary("picker-predicted", ttft_p90=pred_p90),
            "picker-default": _summary("picker-default", ttft_p90=fixed_p90),
        }

    assert check_predicted_overall({"bursty": runs(1, 1)} | {"x": {}}) != []
    assert check_predicted_overall({"bursty": {"picker-default": _summary("picker-default")}}) == []
    one = check_predicted_overall({"bursty": runs(0.5, 1.0)})
    assert _kinds(one) == ["SKIP"], one
    two = check_predicted_overall(
        {"bursty": runs(0.5, 1.0), "churn": runs(0.7, 1.0), "multi": runs(1.2, 1.0)}
    )
    assert _kinds(two) == ["PASS"] and "2 of 3: bursty 0.50x, churn 0.70x, multi 1.20x" in two[0], two
    miss = check_predicted_overall({"bursty": runs(0.5, 1.0), "churn": runs(0.9, 1.0)})
    assert _kinds(miss) == ["MISS"], miss


def test_the_slo_scenario_is_opt_in_and_gives_every_request_an_slo() -> None:
    scenario = SCENARIOS["slo"]
    assert scenario.opt_in and scenario.slo is not None and set(scenario.routers) <= set(ROUTERS)
    ns = argparse.Namespace(scenario=None, seed=42, smoke=False)
    assert "slo" not in [s.name for s in _scenarios(ns)]
    ns.scenario, ns.smoke = ["slo"], True
    (small,) = _scenarios(ns)
    w = _workload(small)
    assert len(slo_targets(w)) == len(w.requests) > 0


def test_model_error_is_read_from_the_plugin_state() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/debug/plugins/state"
        model = {"ready": True, "ttftMedianAbsPctError": 0.1234, "ttftErrorSamples": 256}
        return httpx.Response(200, json={"prefix": {"x": 1}, "predicted-latency-producer": {"model": model}})

    async def read(h: Any) -> RouterRun:
        run = RouterRun("picker-predicted", "s", [], 1.0)
        async with httpx.AsyncClient(transport=httpx.MockTransport(h)) as client:
            await _read_plugin_state(client, "http://picker", run)
        return run

    run = asyncio.run(read(handler))
    assert (run.ttft_mape, run.ttft_mape_samples) == (0.1234, 256)
    run = asyncio.run(read(lambda _r: httpx.Response(200, text="not json")))
    assert math.isnan(run.ttft_mape) and "unreadable" in run.notes[0]


def test_the_load_generator_sends_each_requests_own_headers() -> None:
    seen: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    async def main() -> list[RequestResult]:
        app = web.Application()
        app.router.add_post("/v1/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        w = _workload_with_slo(4)
        specs = [replace(s, at=0.0, body={**s.body, "stream": False}) for s in w.requests]
        opts = LoadOptions(base_url=f"http://127.0.0.1:{port}", headers=(("x-run", "1"),), progress=False)
        try:
            return await run_load(specs, opts)
        finally:
            await runner.cleanup()

    results = asyncio.run(main())
    assert all(r.ok for r in results) and len(seen) == 4
    w = _workload_with_slo(4)
    got = sorted((h["x-slo-ttft-ms"], h.get(OBJECTIVE_HEADER, "")) for h in seen)
    want = sorted(
        (dict(s.headers)[TTFT_HEADER], dict(s.headers).get(OBJECTIVE_HEADER, "")) for s in w.requests
    )
    assert got == want and all(h["x-run"] == "1" and h["x-slo-tpot-ms"] == "50" for h in seen)


def test_report_has_the_slo_table_and_the_model_error(tmp_path: Any) -> None:
    run = RouterRun("picker-predicted", "slo", [_result(0, ttft=0.1), _result(1, status=429, ttft=None)], 1.0)
    run.slos = {0: (200.0, 0.0), 1: (200.0, 0.0)}
    run.ttft_mape, run.ttft_mape_samples = 0.12, 180
    path = write_report(tmp_path, {"slo": [run]}, overall_checks=["SKIP all scenarios: x"])
    text = path.read_text()
    assert "| picker-predicted | 2 | 1 | 1 | 100.0% | 100.0% | – |" in text
    assert "TTFT median absolute error 12.0% over its last 180 predictions" in text
    assert "## Targets across scenarios" in text


def test_the_precise_fed_predicted_profile_is_the_shipped_file_wired_to_the_fleet() -> None:
    import yaml

    from bench.routers import CONFIG_DIR, PREDICTED_PRECISE_CONFIG

    shipped = yaml.safe_load((CONFIG_DIR / "predicted-latency-precise.yaml").read_text())
    fill = {"model": "m", "render_url": "http://r:1", "hash_seed": "7", "kv_events_port": 5557}
    bench = yaml.safe_load(ROUTERS["picker-predicted-precise"].config.format(**fill))
    assert ROUTERS["picker-predicted-precise"].config == PREDICTED_PRECISE_CONFIG
    by_type = {p["type"]: p for p in bench["plugins"]}
    assert by_type["token-producer"]["parameters"] == {"modelName": "m", "vllm": {"url": "http://r:1"}}
    precise = by_type["precise-prefix-cache-producer"]["parameters"]
    assert precise["tokenProcessorConfig"] == {"blockSize": 16, "hashSeed": "7"}
    assert precise["kvEventsConfig"] == {"zmqEndpoint": "tcp://127.0.0.1:5557"}
    wired = ("token-producer", "precise-prefix-cache-producer")
    assert [p for p in bench["plugins"] if p["type"] not in wired] == [
        p for p in shipped["plugins"] if p["type"] not in wired
    ]
    assert bench["schedulingProfiles"] == shipped["schedulingProfiles"]
    spec = yaml.safe_load(ROUTERS["picker-predicted-precise-spec"].config.format(**fill))
    spec_precise = next(p for p in spec["plugins"] if p["type"] == "precise-prefix-cache-producer")
    assert spec_precise["parameters"].pop("speculativeIndexing") is True
    assert spec == bench


def test_the_precise_fed_predicted_profile_has_the_predicted_targets() -> None:
    def runs(p90: float, precise_p90: float, fixed_p90: float) -> dict[str, Summary]:
        return {
            "picker-predicted": _summary(
                "picker-predicted", ttft_p90=p90, ttft_mape=0.4, ttft_mape_samples=9
            ),
            "picker-predicted-precise": _summary(
                "picker-predicted-precise", ttft_p90=precise_p90, ttft_mape=0.1, ttft_mape_samples=9
            ),
            "picker-default": _summary("picker-default", ttft_p90=fixed_p90),
        }

    lines = check(SCENARIOS["working-set"], runs(1.2, 0.6, 1.0))
    mine = [line for line in lines if "picker-predicted-precise" in line]
    assert _kinds(mine) == ["PASS", "SKIP", "PASS"] and "0.60x" in mine[0], mine
    plain = [line for line in lines if "picker-predicted " in line]
    assert _kinds(plain) == ["MISS", "SKIP", "MISS"], plain
    overall = check_predicted_overall({"working-set": runs(1.2, 0.6, 1.0), "bursty": runs(1.0, 0.7, 1.0)})
    assert _kinds(overall) == ["MISS", "PASS"] and "picker-predicted-precise" in overall[1], overall
