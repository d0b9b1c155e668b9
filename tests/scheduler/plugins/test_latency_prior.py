"""The cold-start prior of predicted-latency-producer (``coldStartPrior``): predictions from the first
request (prefill tokens ahead over a measured, at first configured, rate), blended out as the learnt
model warms; the tier filter, scorer and admitter act on them."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from plugin_builders import FakeClock, routed

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.latency import admitter, producer, scorer, tier_filter
from scheduler.plugins.latency.model import MIN_SAMPLES, Features, LatencyModel
from scheduler.plugins.latency.prior import (
    DEFAULT_PREFILL_THROUGHPUT,
    HANDOVER_SAMPLES,
    RATE_MIN_TOKENS,
    RATE_SAMPLES,
    learnt_share,
    prefill_tokens,
)
from scheduler.plugins.latency.producer import PredictedLatencyParams, PredictedLatencyProducer
from scheduler.types import Endpoint, LLMRequest, Metrics

FAST, SLOW = Endpoint("10.0.0.1:8000"), Endpoint("10.0.0.2:8000")
BUSY = Metrics(running_requests=3, kv_cache_usage=0.5)
RATE = 10_000.0  # tokens/s, the configured prior of these tests


def request(i: int = 0, priority: int = 0, tokens: int = 1000, **headers: str) -> LLMRequest:
    hs = {k.replace("_", "-"): v for k, v in headers.items()}
    return LLMRequest(f"r{i}", "m", "m", token_estimate=tokens, headers=hs, priority=priority)


def cold(rate: float = RATE, prior: bool = True) -> PredictedLatencyProducer:
    params = PredictedLatencyParams(
        streaming_mode=True, cold_start_prior=prior, cold_start_prefill_throughput=rate
    )
    return PredictedLatencyProducer("predicted-latency-producer", FakeClock(100.0), params, background=False)


def ttft(m: LatencyModel, endpoint: Endpoint, f: Features) -> float:
    got = m.predict(endpoint.address, f)
    assert got is not None
    return got[0]


def load(p: PredictedLatencyProducer, endpoint: Endpoint, requests: int, first: int = 100) -> None:
    """Dispatch ``requests`` uncached 3,000-token prompts to ``endpoint`` (no first token yet)."""
    for i in range(first, first + requests):
        p.on_dispatched(request(i, tokens=3000), routed(endpoint))


def test_a_cold_model_predicts_the_uncached_tokens_ahead_over_the_configured_rate() -> None:
    p = cold()
    assert not p.model.ready and p.model.predicts
    load(p, FAST, 2)  # 6,000 uncached tokens awaiting a first token on FAST
    got = p.predict(request(1, x_slo_ttft_ms="400", x_slo_tpot_ms="50"), [FAST, SLOW])
    assert got is not None
    assert got[FAST.address].ttft == pytest.approx(1000 * (6000 + 1000) / RATE)  # 700 ms
    assert got[SLOW.address].ttft == pytest.approx(1000 * 1000 / RATE)  # idle: its own prompt, 100 ms
    assert not got[FAST.address].ttft_valid and got[SLOW.address].valid
    assert got[FAST.address].tpot == 0.0  # no TPOT prior
    # the default rate is llm-d's H100 calibration
    assert PredictedLatencyParams().cold_start_prefill_throughput == DEFAULT_PREFILL_THROUGHPUT == 15928
    # upstream's cold start: no predictions at all
    assert cold(prior=False).predict(request(1), [FAST, SLOW]) is None


def test_queued_requests_the_picker_did_not_send_count_as_its_own_average() -> None:
    f = Features(1000, 500, 6000, waiting=5, running=2, kv_usage=0.5, awaiting=2)
    assert prefill_tokens(f) == 500 + 6000 + 3 * 3000  # 3 unknown queued, 3,000 tokens each
    alone = Features(1000, 500, 0, waiting=2, running=0, kv_usage=0.5, awaiting=0)
    assert prefill_tokens(alone) == 500 + 2 * 500  # none of its own: each as this request
    assert prefill_tokens(replace(f, waiting=1)) == 6500  # the scrape lags the picker's own count


def test_measured_rates_replace_the_configured_one_at_the_first_sample() -> None:
    assert RATE_SAMPLES == 1
    m = LatencyModel(prior_throughput=RATE)
    f = Features(2000, 2000, 0, 0, 0, 0.3)
    assert ttft(m, FAST, f) == pytest.approx(200.0)  # 2,000 tokens at 10,000/s
    hit = Features(2000, RATE_MIN_TOKENS - 1, 0, 0, 0, 0.3)
    m.observe(FAST.address, hit, 300.0, None)  # too few tokens: mostly fixed overhead, not counted
    assert ttft(m, FAST, f) == pytest.approx(200.0)
    m.observe(FAST.address, f, 500.0, None)  # 4,000 tokens/s on FAST: used at once, no refit needed
    assert ttft(m, FAST, f) == pytest.approx(500.0)
    assert ttft(m, SLOW, f) == pytest.approx(500.0)  # SLOW has no sample: the fleet's rate
    m.observe(SLOW.address, f, 1000.0, None)  # 2,000 tokens/s on SLOW
    assert ttft(m, FAST, f) == pytest.approx(500.0)
    assert ttft(m, SLOW, f) == pytest.approx(1000.0)
    m.observe(SLOW.address, replace(f, uncached_tokens=1000, prefill_tokens_in_flight=3000), 2000.0, None)
    assert ttft(m, SLOW, f) == pytest.approx(2000 * 3000 / 6000)  # ratio of sums: 6,000 tokens in 3 s
    state = m.state()["coldStartPrior"]
    assert state["endpointRates"] == 2 and state["fleetTokensPerSecond"] == round(8000 / 3.5)
    assert state["defaultTokensPerSecond"] == RATE and state["learntShare"] == 0.0
    m.forget_endpoints(frozenset({SLOW.address}))
    assert ttft(m, SLOW, f) == pytest.approx(2000 / (8000 / 3.5) * 1000)  # back to the fleet's rate


def test_the_prior_blends_out_as_the_learnt_model_warms() -> None:
    with_prior, without = LatencyModel(prior_throughput=RATE), LatencyModel()
    rng = random.Random(3)
    query = Features(3000, 3000, 3000, 0, 1, 0.4)

    def feed(n: int) -> None:
        for _ in range(n):
            uncached = rng.randrange(100, 3000)
            f = Features(3000, uncached, 0, 0, 0, 0.4)
            ttft = 30.0 + 0.1 * uncached  # the learnt model can fit this, the prior only approximates it
            for m in (with_prior, without):
                m.observe(FAST.address, f, ttft, None)
        for m in (with_prior, without):
            m.refit()

    feed(MIN_SAMPLES - 1)
    assert without.predict(FAST.address, query) is None
    prior_only = with_prior.predict(FAST.address, query)
    assert prior_only is not None
    feed(1)  # the learnt model predicts: half learnt, half prior
    assert learnt_share(MIN_SAMPLES) == 0.5
    learnt = without.predict(FAST.address, query)
    blended = with_prior.predict(FAST.address, query)
    assert learnt is not None and blended is not None
    prior = with_prior._prior
    assert prior is not None
    assert blended[0] == pytest.approx(0.5 * learnt[0] + 0.5 * prior.ttft(FAST.address, query))
    assert blended[0] != pytest.approx(learnt[0])
    feed(HANDOVER_SAMPLES - MIN_SAMPLES)  # from HANDOVER_SAMPLES on: the learnt model alone
    assert with_prior.predict(FAST.address, query) == without.predict(FAST.address, query)
    assert with_prior.state()["coldStartPrior"]["learntShare"] == 1.0


def test_the_admitter_rejects_a_tight_sheddable_request_on_a_cold_busy_fleet() -> None:
    p = cold()
    a = admitter.LatencySloAdmitter("a")
    a.bind_latency_producer(p)
    tight = request(1, priority=-1, x_slo_ttft_ms="400", x_slo_tpot_ms="50")
    warm = Metrics(kv_cache_usage=0.1)
    idle = [replace(FAST, metrics=warm), replace(SLOW, metrics=warm)]
    assert a.admit(tight, idle) is None  # idle fleet: predicted 100 ms
    load(p, FAST, 1)
    load(p, SLOW, 1, first=200)
    busy = [replace(FAST, metrics=BUSY), replace(SLOW, metrics=BUSY)]
    reason = a.admit(tight, busy)  # 3,000 tokens ahead everywhere: 400 ms predicted
    assert reason is not None and "x-slo-ttft-ms=400" in reason and "best predicted ttft 400 ms" in reason
    assert a.admit(request(1, priority=-1, x_slo_ttft_ms="3000", x_slo_tpot_ms="50"), busy) is None  # loose
    assert a.admit(request(1, priority=0, x_slo_ttft_ms="400", x_slo_tpot_ms="50"), busy) is None  # critical
    upstream = admitter.LatencySloAdmitter("a")
    upstream.bind_latency_producer(q := cold(prior=False))
    load(q, FAST, 1)
    load(q, SLOW, 1, first=200)
    assert upstream.admit(tight, busy) is None  # upstream: admit while the model cannot predict


def test_the_tier_filter_and_scorer_act_on_the_prior_from_the_first_request() -> None:
    p = cold()
    load(p, FAST, 2)  # FAST has 6,000 tokens ahead: 700 ms for a 1,000-token prompt, SLOW 100 ms
    f = tier_filter.SloHeadroomTierFilter("t", random.Random(1), tier_filter.SloHeadroomTierParams(0.0))
    f.bind_latency_producer(p)
    tight = request(1, x_slo_ttft_ms="400", x_slo_tpot_ms="50")
    assert list(f.filter(CycleState(), tight, [FAST, SLOW])) == [SLOW]
    s = scorer.LatencyScorer("s", scorer.LatencyScorerParams(headroom_selection_strategy="most"))
    s.bind_latency_producer(p)
    loose = request(2, x_slo_ttft_ms="3000", x_slo_tpot_ms="50")
    assert s.score(CycleState(), loose, [FAST, SLOW]) == [0.01, 1.0]


def test_cold_start_parameters_are_validated() -> None:
    params = {"coldStartPrior": False, "coldStartPrefillThroughput": 8000}
    plugin = producer.factory("p", params, PluginHandle())
    assert plugin.params.cold_start_prefill_throughput == 8000 and not plugin.model.predicts
    for bad in (0, -1, "fast"):
        with pytest.raises(ConfigError, match="coldStartPrefillThroughput"):
            producer.factory("p", {"coldStartPrefillThroughput": bad}, PluginHandle())
    with pytest.raises(ConfigError, match="coldStartPrior"):
        producer.factory("p", {"coldStartPrior": "maybe"}, PluginHandle())
