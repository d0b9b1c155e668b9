"""predicted-latency-producer, latency-scorer, slo-headroom-tier-filter, latency-slo-admitter and the
affinity filter's latencyPredictor TTFT source."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest
from plugin_builders import FakeClock, routed, routed_pd

from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.observer import InflightLoadSource, LatencyReport
from scheduler.plugins.filters.prefix_affinity import PrefixAffinityFilter, PrefixAffinityParams
from scheduler.plugins.latency import admitter, producer, scorer, tier_filter
from scheduler.plugins.latency.consumer import LatencyInfoConsumer
from scheduler.plugins.latency.model import MIN_SAMPLES, Features, RidgeStats
from scheduler.plugins.latency.producer import PredictedLatencyParams, PredictedLatencyProducer
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.types import Completion, Endpoint, LLMRequest, Metrics, Outcome, Usage

FAST, SLOW = Endpoint("10.0.0.1:8000"), Endpoint("10.0.0.2:8000")
BUSY = Metrics(running_requests=3, kv_cache_usage=0.5)
UPSTREAM_COLD = PredictedLatencyParams(cold_start_prior=False)  # no predictions before MIN_SAMPLES


def request(i: int = 0, priority: int = 0, **headers: str) -> LLMRequest:
    hs = {k.replace("_", "-"): v for k, v in headers.items()}
    return LLMRequest(f"r{i}", "m", "m", token_estimate=1000, headers=hs, priority=priority)


def trained(params: PredictedLatencyParams | None = None) -> PredictedLatencyProducer:
    """A producer whose model learnt TTFT = 100 ms on FAST and 1000 ms on SLOW, TPOT 10 / 40 ms."""
    p = PredictedLatencyProducer("predicted-latency-producer", FakeClock(100.0), params, background=False)
    f = Features(1000, 1000, 0, 0, 0, 0.5)
    for _ in range(10 * MIN_SAMPLES):
        p.model.observe(FAST.address, f, 100.0, 10.0)
        p.model.observe(SLOW.address, f, 1000.0, 40.0)
    p.model.refit()
    return p


def mean_target(stats: RidgeStats) -> float:
    """The weighted mean latency learnt (the bias feature is 1: ``b[0] / A[0][0]``)."""
    return stats.b[0] / stats.a[0]


def test_producer_trains_from_the_lifecycle_streaming() -> None:
    clock = FakeClock(100.0)
    p = PredictedLatencyProducer("p", clock, PredictedLatencyParams(streaming_mode=True), background=False)
    r = request()
    p.prepare(CycleState(), r, [FAST])
    p.on_dispatched(r, routed(FAST))
    assert p._dispatched == {FAST.address: 1} and p._prefill_tokens == {FAST.address: 1000}
    clock.now += 0.25
    p.on_response_headers(r, routed(FAST), 200, {})
    p.on_response_chunk(r, routed(FAST), b"x")
    assert p._prefill_tokens == {}  # prefill done at the first chunk
    stats = p.model._endpoints[FAST.address]  # the TTFT sample is learnt at the first chunk
    assert stats.ttft.n == 1 and mean_target(stats.ttft) == pytest.approx(250.0) and stats.tpot.n == 0
    clock.now += 0.9
    p.on_completed(r, routed(FAST), Completion(Outcome.OK, usage=Usage(completion_tokens=10)))
    assert p._dispatched == {} and p.model.refits == 2
    assert stats.ttft.n == 1 and mean_target(stats.ttft) == pytest.approx(250.0)  # ttft = 250 ms
    assert mean_target(stats.tpot) == pytest.approx(100.0)  # tpot = 900 ms / 9 tokens


def test_producer_streaming_trains_no_ttft_from_an_error_response() -> None:
    clock = FakeClock(100.0)
    p = PredictedLatencyProducer("p", clock, PredictedLatencyParams(streaming_mode=True), background=False)
    r = request()
    p.on_dispatched(r, routed(FAST))
    clock.now += 0.05
    p.on_response_headers(r, routed(FAST), 503, {})
    p.on_response_chunk(r, routed(FAST), b'{"error": "overloaded"}')
    p.on_completed(r, routed(FAST), Completion(Outcome.UPSTREAM_ERROR))
    assert p.model.pending == 0 and FAST.address not in p.model._endpoints and p._contexts == {}


def test_producer_non_streaming_trains_end_to_end_ttft_and_skips_failures() -> None:
    clock = FakeClock(100.0)
    p = PredictedLatencyProducer("p", clock, background=False)
    r = request()
    p.on_dispatched(r, routed(FAST))
    clock.now += 0.1
    p.on_response_chunk(r, routed(FAST), b"x")
    clock.now += 0.4
    p.on_completed(r, routed(FAST), Completion(Outcome.OK, usage=Usage(completion_tokens=10)))
    stats = p.model._endpoints[FAST.address]
    assert mean_target(stats.ttft) == pytest.approx(500.0) and stats.tpot.n == 0
    r2 = request(2)
    p.on_dispatched(r2, routed(FAST))
    p.on_completed(r2, routed(FAST), Completion(Outcome.UPSTREAM_ERROR))
    assert stats.ttft.n == 1 and p._contexts == {}


def test_producer_pd_trains_ttft_on_prefill_and_tpot_on_decode() -> None:
    clock = FakeClock(100.0)
    p = PredictedLatencyProducer("p", clock, PredictedLatencyParams(streaming_mode=True), background=False)
    r = request()
    p.on_dispatched(r, routed_pd(FAST, SLOW))
    assert p._prefill_tokens == {SLOW.address: 1000}
    clock.now += 0.2
    p.on_response_chunk(r, routed_pd(FAST, SLOW), b"x")
    clock.now += 0.3
    p.on_completed(r, routed_pd(FAST, SLOW), Completion(Outcome.OK, usage=Usage(completion_tokens=4)))
    assert p.model._endpoints[SLOW.address].ttft.n == 1 and p.model._endpoints[SLOW.address].tpot.n == 0
    assert p.model._endpoints[FAST.address].tpot.n == 1 and p.model._endpoints[FAST.address].ttft.n == 0


def test_producer_expires_requests_after_context_ttl() -> None:
    clock = FakeClock(100.0)
    p = PredictedLatencyProducer("p", clock, PredictedLatencyParams(context_ttl=10.0), background=False)
    p.on_dispatched(request(1), routed(FAST))
    clock.now += 11
    p.on_dispatched(request(2), routed(SLOW))
    assert list(p._contexts) == ["r2"] and p._dispatched == {SLOW.address: 1}


def test_producer_background_trainer_refits_off_the_caller() -> None:
    clock = FakeClock(100.0)
    p = PredictedLatencyProducer("p", clock)
    for i in range(MIN_SAMPLES):
        r = request(i)
        p.on_dispatched(r, routed(FAST))
        clock.now += 0.1
        p.on_completed(r, routed(FAST), Completion(Outcome.OK))
    assert p._trainer is not None and p._trainer.is_alive()
    deadline = time.monotonic() + 10.0
    while not p.model.ready and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.model.ready and p.model.pending == 0


def test_predictions_and_headroom_follow_the_slo_headers() -> None:
    p = trained(PredictedLatencyParams(streaming_mode=True))
    infos = p.predict(
        request(x_slo_ttft_ms="500", x_slo_tpot_ms="20"),
        [replace(FAST, metrics=BUSY), replace(SLOW, metrics=BUSY)],
    )
    assert infos is not None
    fast, slow = infos[FAST.address], infos[SLOW.address]
    assert fast.ttft == pytest.approx(100.0, rel=0.05) and slow.ttft == pytest.approx(1000.0, rel=0.05)
    assert fast.valid and not slow.valid
    assert fast.ttft_headroom == pytest.approx(500.0 - fast.ttft)
    assert slow.tpot_headroom == pytest.approx(20.0 - slow.tpot)
    # no SLO: headroom is -predicted; not a number counts as absent
    infos = p.predict(request(x_slo_ttft_ms="soon"), [FAST])
    assert infos is not None and infos[FAST.address].ttft_headroom == pytest.approx(-infos[FAST.address].ttft)
    # non-streaming: TPOT neutralised
    q = trained()
    info = (q.predict(request(x_slo_tpot_ms="1"), [SLOW]) or {})[SLOW.address]
    assert info.tpot_valid and info.tpot_headroom == 0.0
    # training only
    assert trained(PredictedLatencyParams(predict_in_produce=False)).predict(request(), [FAST]) is None


def test_producer_rejects_unsupported_and_invalid_parameters() -> None:
    for key, value, match in [
        ("samplingMean", 1000, "deprecated upstream"),
        ("useEncoderCacheFeatures", True, "multimodal"),
        ("inFlightLoadProducerName", "x", "own in-flight accounting"),
        ("sloBufferFactor", 0, "sloBufferFactor"),
        ("contextTTL", "soon", "contextTTL"),
    ]:
        with pytest.raises(ConfigError, match=match) as info:
            producer.factory("plp", {key: value}, PluginHandle())
        assert f"parameters.{key}" in str(info.value)


def test_scorer_prefers_lowest_predicted_latency_and_falls_back_when_cold() -> None:
    s = scorer.LatencyScorer("s")
    cold = PredictedLatencyProducer("p", FakeClock(100.0), UPSTREAM_COLD, background=False)
    s.bind_latency_producer(cold)
    busy = replace(SLOW, metrics=Metrics(waiting_queue_size=4, kv_cache_usage=0.9))
    # composite: (kvFree + relQueue + prefix) / 3 -> FAST (1 + 1 + 0) / 3, busy (0.1 + 0 + 0) / 3
    assert s.score(CycleState(), request(), [FAST, busy]) == [0.67, 0.03]
    # the picker's own requests awaiting a first token count as queued before the scrape shows them
    cold.on_dispatched(request(1), routed(FAST))
    cold.on_dispatched(request(2), routed(FAST))
    assert cold.awaiting_first_token(FAST.address) == 2
    assert s.score(CycleState(), request(), [FAST, busy]) == [0.5, 0.03]  # FAST: 2 queued of max 4
    idle = replace(SLOW, metrics=Metrics(kv_cache_usage=0.0))
    assert s.score(CycleState(), request(), [FAST, idle]) == [0.33, 0.67]
    cold.on_response_chunk(request(1), routed(FAST), b"x")  # first token: no longer queued
    assert cold.awaiting_first_token(FAST.address) == 1
    cold.on_completed(request(2), routed(FAST), Completion(Outcome.CLIENT_CANCEL))
    assert cold.awaiting_first_token(FAST.address) == 0
    s.bind_latency_producer(trained())
    # no SLO: all negative, both idle -> least |headroom| wins
    assert s.score(CycleState(), request(), [FAST, SLOW]) == [1.0, 0.01]
    # SLO met only by FAST: FAST alone is scored
    assert s.score(CycleState(), request(x_slo_ttft_ms="500"), [FAST, SLOW]) == [0.5, 0.0]
    most = scorer.LatencyScorer("m", scorer.LatencyScorerParams(headroom_selection_strategy="most"))
    most.bind_latency_producer(trained())
    assert most.score(CycleState(), request(x_slo_ttft_ms="5000"), [FAST, SLOW]) == [1.0, 0.01]
    with pytest.raises(ConfigError, match="headroomSelectionStrategy"):
        scorer.factory("s", {"headroomSelectionStrategy": "middle"}, PluginHandle())


def test_tier_filter_keeps_the_positive_tier() -> None:
    f = tier_filter.SloHeadroomTierFilter("t", random.Random(1), tier_filter.SloHeadroomTierParams(0.0))
    f.bind_latency_producer(PredictedLatencyProducer("p", FakeClock(100.0), UPSTREAM_COLD, background=False))
    assert list(f.filter(CycleState(), request(x_slo_ttft_ms="500"), [FAST, SLOW])) == [FAST, SLOW]  # cold
    f.bind_latency_producer(trained())
    assert list(f.filter(CycleState(), request(x_slo_ttft_ms="500"), [FAST, SLOW])) == [FAST]
    assert list(f.filter(CycleState(), request(), [FAST, SLOW])) == [FAST, SLOW]  # no SLO: one tier
    assert "SLO headroom ttft" in f.reason(CycleState(), request(x_slo_ttft_ms="500"), SLOW)
    always = tier_filter.SloHeadroomTierFilter("t", random.Random(1), tier_filter.SloHeadroomTierParams(1.0))
    always.bind_latency_producer(trained())
    assert list(always.filter(CycleState(), request(x_slo_ttft_ms="500"), [FAST, SLOW])) == [SLOW]
    with pytest.raises(ConfigError, match="epsilonExploreNeg"):
        tier_filter.factory("t", {"epsilonExploreNeg": 2}, PluginHandle())


def test_admitter_rejects_sheddable_requests_no_endpoint_can_serve_in_time() -> None:
    a = admitter.LatencySloAdmitter("a")
    a.bind_latency_producer(trained())
    busy = [replace(FAST, metrics=BUSY), replace(SLOW, metrics=BUSY)]
    impossible = request(priority=-1, x_slo_ttft_ms="10")
    reason = a.admit(impossible, busy)
    assert reason is not None and "x-slo-ttft-ms=10" in reason and "best predicted ttft 10" in reason
    assert a.admit(request(priority=0, x_slo_ttft_ms="10"), busy) is None  # not sheddable
    assert a.admit(request(priority=-1), busy) is None  # no SLO
    assert a.admit(request(priority=-1, x_slo_ttft_ms="500"), busy) is None  # FAST meets it
    assert a.admit(impossible, [FAST, replace(SLOW, metrics=BUSY)]) is None  # FAST is idle
    cold = admitter.LatencySloAdmitter("a")
    cold.bind_latency_producer(
        PredictedLatencyProducer("p", FakeClock(100.0), UPSTREAM_COLD, background=False)
    )
    assert cold.admit(impossible, busy) is None


def test_admitter_counts_the_pickers_own_dispatches_against_a_stale_idle_endpoint() -> None:
    a = admitter.LatencySloAdmitter("a")
    a.bind_latency_producer(p := trained())
    warm_idle = replace(FAST, metrics=Metrics(running_requests=0, kv_cache_usage=0.5))
    stale_idle = [warm_idle, replace(SLOW, metrics=BUSY)]  # FAST's scrape says 0 running
    impossible = request(priority=-1, x_slo_ttft_ms="10")
    assert a.admit(impossible, stale_idle) is None
    p.on_dispatched(request(7), routed(FAST))  # ... but this picker just sent it a request
    assert a.admit(impossible, stale_idle) is not None
    p.on_completed(request(7), routed(FAST), Completion(Outcome.CLIENT_CANCEL))
    assert a.admit(impossible, stale_idle) is None


class HeldBy:
    """A prefix producer whose match says ``address`` holds the whole prompt (1,008 tokens)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def match(self, cycle: CycleState, request: LLMRequest) -> PrefixMatch:
        return PrefixMatch(tuple(range(63)), {self.address: 63}, 16, "p")


def test_admitter_predicts_with_the_prefix_match_as_upstream() -> None:
    p = PredictedLatencyProducer("p", FakeClock(100.0), background=False)
    for i in range(10 * MIN_SAMPLES):  # TTFT = 100 ms + 0.9 ms per uncached token, on both
        uncached = (i * 37) % 1001
        for e in (FAST, SLOW):
            p.model.observe(e.address, Features(1000, uncached, 0, 0, 0, 0.5), 100 + 0.9 * uncached, 10)
    p.model.refit()
    a = admitter.LatencySloAdmitter("a")
    a.bind_latency_producer(p)
    busy = [replace(FAST, metrics=BUSY), replace(SLOW, metrics=BUSY)]
    sheddable = request(priority=-1, x_slo_ttft_ms="500")
    reason = a.admit(sheddable, busy)  # no prefix source: every token uncached, ~1,000 ms
    assert reason is not None and "best predicted ttft 99" in reason  # 1,000 ms, give or take the ridge
    p.bind_producer("PrefixCacheMatchInfo/approx-prefix-cache-producer", HeldBy(SLOW.address))
    assert a.admit(sheddable, busy) is None  # SLOW holds the prompt: ~100 ms


def test_affinity_filter_latency_predictor_source_breaks_stickiness() -> None:
    params = PrefixAffinityParams(
        exploration_probability=0.0, max_ttft_penalty_ms=500.0, ttft_source="latencyPredictor"
    )
    f = PrefixAffinityFilter("f", random.Random(1), lambda: 0.0, params)
    f.bind_latency_producer(trained())
    c = CycleState()
    c.write(PREFIX_MATCH, PrefixMatch(tuple(range(10)), {SLOW.address: 10}, 16, "p"))
    assert list(f.filter(c, request(), [FAST, SLOW])) == [FAST, SLOW]  # sticky SLOW is 900 ms slower
    c2 = CycleState()
    c2.write(PREFIX_MATCH, PrefixMatch(tuple(range(10)), {FAST.address: 10}, 16, "p"))
    assert list(f.filter(c2, request(), [FAST, SLOW])) == [FAST]


CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-affinity-filter
  parameters: {ttftSource: latencyPredictor}
- type: latency-scorer
- type: latency-slo-admitter
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-affinity-filter
  - pluginRef: latency-scorer
"""


def test_config_injects_one_producer_shared_by_its_consumers() -> None:
    resolved = load_config_text(CONFIG)
    plugins = {p.spec.name: p for p in resolved.plugins}
    produced = plugins["predicted-latency-producer"]
    assert produced.implicit and isinstance(produced.plugin, PredictedLatencyProducer)
    # the producer reads the prefix match (uncached tokens are a feature): a prefix producer is injected
    assert produced.plugin.producer is plugins["approx-prefix-cache-producer"].plugin
    for name in ("prefix-cache-affinity-filter", "latency-scorer", "latency-slo-admitter"):
        consumer = plugins[name].plugin
        assert isinstance(consumer, LatencyInfoConsumer) and consumer.latency_producer is produced.plugin
    bad = CONFIG.replace(
        "- type: latency-scorer",
        "- type: latency-scorer\n  parameters: {latencyPredictionInfoProducerName: nope}",
    )
    with pytest.raises(ConfigError, match="latencyPredictionInfoProducerName"):
        load_config_text(bad)


class RecordingLatency:
    """A scheduler.observer.LatencyMetrics fake (plus the PluginMetrics methods)."""

    def __init__(self) -> None:
        self.reports: list[LatencyReport] = []
        self.durations: list[tuple[str, str, float]] = []

    def pd_decision(self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str) -> None:
        pass

    def disagg_decision(
        self, plugin_type: str, plugin_name: str, model_name: str, decision_type: str
    ) -> None:
        pass

    def watch_inflight_load(self, source: InflightLoadSource) -> None:
        pass

    def latency_observed(self, plugin_type: str, plugin_name: str, report: LatencyReport) -> None:
        self.reports.append(report)

    def latency_predicted(
        self, plugin_type: str, plugin_name: str, model_name: str, target_model_name: str, seconds: float
    ) -> None:
        self.durations.append((model_name, target_model_name, seconds))


def test_producer_reports_the_prefill_ttft_and_decode_tpot_predictions_in_pd() -> None:
    p = trained(PredictedLatencyParams(streaming_mode=True))
    clock = FakeClock(100.0)
    p._clock = clock
    metrics = RecordingLatency()
    p.bind_metrics(metrics)
    r = LLMRequest("r1", "m", "tm", token_estimate=1000, headers={"x-slo-tpot-ms": "20"})
    cycle = CycleState()
    p.prepare(cycle, r, [FAST, SLOW])
    assert p.predictions(cycle, r, [replace(FAST, metrics=BUSY), replace(SLOW, metrics=BUSY)]) is not None
    assert [(m, t) for m, t, _ in metrics.durations] == [("m", "tm")] and metrics.durations[0][2] >= 0
    p.on_dispatched(r, routed_pd(FAST, SLOW))  # prefill on SLOW, decode on FAST
    clock.now += 0.3
    p.on_response_chunk(r, routed_pd(FAST, SLOW), b"x")
    clock.now += 0.2
    p.on_completed(r, routed_pd(FAST, SLOW), Completion(Outcome.OK, usage=Usage(completion_tokens=5)))
    (report,) = metrics.reports
    assert (report.model_name, report.target_model_name) == ("m", "tm")
    assert report.ttft == pytest.approx(0.3) and report.tpot == pytest.approx(0.05)
    assert report.predicted_ttft == pytest.approx(1.0, rel=0.05)  # SLOW's TTFT
    assert report.predicted_tpot == pytest.approx(0.01, rel=0.05)  # FAST's TPOT
    assert (report.ttft_slo, report.tpot_slo) == (0.0, 0.02)
    assert p._predicted == {}
