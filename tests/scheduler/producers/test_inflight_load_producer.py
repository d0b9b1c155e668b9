"""inflight-load-producer and its consumers (active-request-scorer, token-load-scorer).

Cases ported from llm-d-router (commit ebab68792)
pkg/epp/framework/plugins/requestcontrol/dataproducer/inflightload/producer_test.go:
ExcludeOutputTokens_StartOfStreamRelease, ExcludeOutputTokens_PrefillReleasedAtStartOfStream,
ExcludeOutputTokens_SingleChunk, BalancedAddRelease_MultipleProfilesSameEndpoint,
ExcludeOutputTokens_EndOfStreamWithoutStart, UncachedInputTokens_Overestimate,
Factory_OutputRatio, Factory_MaxEstimatedOutputTokens.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.plugins.scorers.active_request import ActiveRequestScorer
from scheduler.plugins.scorers.token_load import TokenLoadScorer
from scheduler.plugins.shared.inflight_load import InflightLoadProducer, _uncached, factory
from scheduler.types import (
    Completion,
    Endpoint,
    LLMRequest,
    Outcome,
    ProfileResult,
    SchedulingResult,
    ScoredEndpoint,
)

P, D = Endpoint("10.0.0.1:8000"), Endpoint("10.0.0.2:8000")
DONE = Completion(Outcome.OK)


def producer(**parameters: Any) -> InflightLoadProducer:
    plugin = factory("inflight-load-producer", parameters, PluginHandle())
    assert isinstance(plugin, InflightLoadProducer)
    return plugin


def request(tokens: int, rid: str = "r") -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", token_estimate=tokens)


def result(**profiles: Endpoint) -> SchedulingResult:
    first = next(iter(profiles.values()))
    return SchedulingResult(
        primary_profile=next(iter(profiles)),
        endpoints=(first,),
        profile_results={k: ProfileResult(k, (ScoredEndpoint(e, 1.0),)) for k, e in profiles.items()},
        headers={},
    )


def load(p: InflightLoadProducer, ep: Endpoint) -> tuple[int, int]:
    return p.request_counts.get(ep.address, 0), p.token_counts.get(ep.address, 0)


def test_tokens_released_at_first_chunk_request_at_completion() -> None:
    p = producer()
    req, res = request(4), result(default=D)
    p.on_dispatched(req, res)
    assert load(p, D) == (1, 4)
    p.on_response_chunk(req, res, b"data: x")
    assert load(p, D) == (1, 0)
    p.on_completed(req, res, DONE)
    assert load(p, D) == (0, 0)


def test_prefill_released_at_first_chunk() -> None:
    p = producer()
    req, res = request(4), result(decode=D, prefill=P)
    p.on_dispatched(req, res)
    assert load(p, P) == (1, 4) and load(p, D) == (1, 4)
    p.on_response_chunk(req, res, b"x")
    assert load(p, P) == (0, 0) and load(p, D) == (1, 0)
    p.on_completed(req, res, DONE)
    assert load(p, D) == (0, 0)


def test_completion_without_a_chunk_drains_everything() -> None:  # EndOfStreamWithoutStart
    p = producer()
    req, res = request(4), result(default=D)
    p.on_dispatched(req, res)
    p.on_completed(req, res, DONE)
    p.on_completed(req, res, DONE)  # idempotent
    assert load(p, D) == (0, 0)


def test_two_profiles_on_one_endpoint_balance() -> None:  # BalancedAddRelease_MultipleProfilesSameEndpoint
    p = producer(addEstimatedOutputTokens=True)  # 4 input + 6 output per profile
    req, res = request(4), result(prefill=D, decode=D)
    p.on_dispatched(req, res)
    assert load(p, D) == (2, 20)
    p.on_response_chunk(req, res, b"x")
    assert load(p, D) == (1, 10)
    p.on_completed(req, res, DONE)
    assert load(p, D) == (0, 0)


@pytest.mark.parametrize(
    ("parameters", "prompt", "expected"),
    [
        ({"addEstimatedOutputTokens": True}, 10, 10 + 15),  # default ratio 1.5
        ({"addEstimatedOutputTokens": True, "outputRatio": 2.0}, 10, 10 + 20),
        ({"addEstimatedOutputTokens": True, "outputRatio": 0.0}, 10, 10),
        ({"addEstimatedOutputTokens": True, "maxEstimatedOutputTokens": 40}, 100, 100 + 40),
        ({"addEstimatedOutputTokens": True, "maxEstimatedOutputTokens": 400}, 100, 100 + 150),
        ({}, 100, 100),
    ],
)
def test_output_estimate(parameters: dict[str, Any], prompt: int, expected: int) -> None:
    p = producer(**parameters)
    p.on_dispatched(request(prompt), result(default=D))
    assert load(p, D) == (1, expected)


@pytest.mark.parametrize("parameters", [{"outputRatio": -1.0}, {"maxEstimatedOutputTokens": -1}, {"nope": 1}])
def test_bad_parameters(parameters: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        producer(**parameters)


def test_uncached_tokens_trust_the_prefix_index() -> None:  # UncachedInputTokens_Overestimate
    match = PrefixMatch((1, 2), {D.address: 1}, 4, "x")
    assert _uncached(5, match, D.address) == 4
    assert _uncached(20, match, D.address) == 4 + 12  # plus the unhashed tail
    assert _uncached(20, match, P.address) == 20
    assert _uncached(20, None, D.address) == 20


def test_prefix_discount_from_the_cycle() -> None:  # PrefixCacheDiscount_PerEndpoint
    p = producer()
    cycle = CycleState()
    cycle.write(PREFIX_MATCH, PrefixMatch((1, 2, 3, 4), {D.address: 3}, 16, "x"))
    req = request(64)
    p.prepare(cycle, req, [D, P])
    p.on_dispatched(req, result(decode=D, prefill=P))
    assert load(p, D) == (1, 16) and load(p, P) == (1, 64)


def test_removed_endpoints_are_forgotten() -> None:
    p = producer()
    req, res = request(4), result(default=D)
    p.on_dispatched(req, res)
    p.on_endpoints_removed(frozenset({D.address}))
    assert load(p, D) == (0, 0)
    p.on_completed(req, res, DONE)
    assert load(p, D) == (0, 0)


# -- consumers -------------------------------------------------------------------------------------

HEAD = "kind: EndpointPickerConfig\nplugins:\n"


def config(api_version: str, plugins: str, ref: str) -> str:
    return (
        f"apiVersion: {api_version}\n{HEAD}{plugins}"
        f"schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: {ref}\n"
    )


def test_active_request_scorer_reads_the_injected_producer_under_the_new_api_version() -> None:
    resolved = load_config_text(
        config("llm-d.ai/v1alpha1", "- type: active-request-scorer\n", "active-request-scorer")
    )
    scorer, made = resolved.plugin("active-request-scorer"), resolved.plugin("inflight-load-producer")
    assert isinstance(scorer, ActiveRequestScorer) and isinstance(made, InflightLoadProducer)
    assert scorer.inflight_producer is made
    req, res = request(4, "a"), result(default=D)
    scorer.on_dispatched(req, res)  # its own tracking is off
    assert scorer.tracker.request_counts == {}
    made.on_dispatched(req, res)
    assert scorer.score(CycleState(), request(1, "b"), [D, P]) == [0.0, 1.0]


@pytest.mark.parametrize(
    ("api_version", "plugins"),
    [
        ("inference.networking.x-k8s.io/v1alpha1", "- type: active-request-scorer\n"),
        ("llm-d.ai/v1alpha1", "- {type: active-request-scorer, parameters: {requestTimeout: 1m}}\n"),
    ],
)
def test_active_request_scorer_keeps_its_own_tracking(api_version: str, plugins: str) -> None:
    resolved = load_config_text(config(api_version, plugins, "active-request-scorer"))
    scorer = resolved.plugin("active-request-scorer")
    assert isinstance(scorer, ActiveRequestScorer) and scorer.inflight_producer is None
    assert "inflight-load-producer" not in resolved.handle.plugins
    scorer.on_dispatched(request(4, "a"), result(default=D))
    assert scorer.score(CycleState(), request(1, "b"), [D, P]) == [0.0, 1.0]


def test_token_load_scorer_adds_this_requests_uncached_tokens() -> None:
    plugins = (
        "- {name: load, type: inflight-load-producer}\n"
        "- type: token-load-scorer\n"
        "  parameters: {inFlightLoadProducerName: load, queueThresholdTokens: 100}\n"
    )
    resolved = load_config_text(config("llm-d.ai/v1alpha1", plugins, "token-load-scorer"))
    scorer, made = resolved.plugin("token-load-scorer"), resolved.plugin("load")
    assert isinstance(scorer, TokenLoadScorer) and isinstance(made, InflightLoadProducer)
    made.on_dispatched(request(30, "a"), result(default=D))
    scores = scorer.score(CycleState(), request(20, "b"), [D, P])
    assert scores == pytest.approx([1 - 50 / 100, 1 - 20 / 100])


@pytest.mark.parametrize(
    ("plugins", "location"),
    [
        (
            "- {type: token-load-scorer, parameters: {inFlightLoadProducerName: nope}}\n",
            "plugins[0].parameters.inFlightLoadProducerName",
        ),
        (
            "- {type: token-load-scorer, parameters: {inFlightLoadProducerName: x, requestTimeout: 1m}}\n",
            '(token-load-scorer "token-load-scorer"): parameters.requestTimeout',
        ),
    ],
)
def test_consumer_errors(plugins: str, location: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config_text(config("llm-d.ai/v1alpha1", plugins, "token-load-scorer"))
    assert (err.value.location or "").endswith(location)


def test_the_scheduler_drives_the_injected_producer() -> None:
    """The implicit producer is one of the scheduler's plugins: its hooks run through the Scheduler."""
    text = config("llm-d.ai/v1alpha1", "- type: active-request-scorer\n", "active-request-scorer")
    resolved = load_config_text(text)
    scheduler = resolved.build_scheduler()
    made = resolved.plugin("inflight-load-producer")
    assert isinstance(made, InflightLoadProducer)
    req = LLMRequest(request_id="a", model="m", target_model="m", prompt_text="x" * 400, stream=True)
    res = scheduler.schedule(req, [D, P])
    scheduler.dispatched(req, res)
    chosen = res.endpoints[0]
    assert load(made, chosen) == (1, 100)
    scheduler.response_chunk(req, res, b"data: {}\n\n")
    assert load(made, chosen) == (1, 0)
    scheduler.completed(req, res, DONE)
    assert load(made, chosen) == (0, 0)
    second = scheduler.schedule(LLMRequest(request_id="b", model="m", target_model="m"), [D, P])
    assert second.endpoints  # the scorer reads the producer's (now empty) counts without error


def test_concurrency_detector_reads_the_producer() -> None:
    from scheduler.plugins.saturation.concurrency import ConcurrencyDetector

    text = (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
        "- {type: concurrency-detector, parameters: {maxConcurrency: 1}}\n- type: queue-scorer\n"
        "saturationDetector: {pluginRef: concurrency-detector}\n"
    )
    resolved = load_config_text(text)
    detector, made = resolved.plugin("concurrency-detector"), resolved.plugin("inflight-load-producer")
    assert isinstance(detector, ConcurrencyDetector) and isinstance(made, InflightLoadProducer)
    assert not detector.is_saturated([D], 0.0)
    made.on_dispatched(request(4), result(default=D))
    assert detector.is_saturated([D], 0.0) and detector.saturation([D, P], 0.0) == 0.5


def test_prefix_cache_affinity_filter_gate_reads_the_producer() -> None:
    from scheduler.plugins.filters.prefix_affinity import PrefixAffinityFilter
    from scheduler.plugins.prefix.producer import ApproxPrefixCacheProducer

    text = (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
        "- {type: approx-prefix-cache-producer, parameters: {autoTune: false}}\n"
        "- type: prefix-cache-affinity-filter\n"
        "  parameters: {explorationProbability: 0, maxTTFTPenaltyMs: 1000, peakPrefillThroughput: 1000}\n"
        "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: prefix-cache-affinity-filter\n"
    )
    resolved = load_config_text(text)
    flt, load_producer = (
        resolved.plugin("prefix-cache-affinity-filter"),
        resolved.plugin("inflight-load-producer"),
    )
    prefix = resolved.plugin("approx-prefix-cache-producer")
    assert isinstance(flt, PrefixAffinityFilter) and isinstance(load_producer, InflightLoadProducer)
    assert isinstance(prefix, ApproxPrefixCacheProducer)
    assert flt.inflight_producer is load_producer and flt.producer is prefix
    prompt = "s" * 8192
    warm = LLMRequest(request_id="w", model="m", target_model="m", prompt_text=prompt)
    prefix.on_dispatched(warm, result(default=D))
    ask = LLMRequest(request_id="q", model="m", target_model="m", prompt_text=prompt)
    assert list(flt.filter(CycleState(), ask, [D, P])) == [D]  # sticky to D
    load_producer.on_dispatched(request(1500, "busy"), result(default=D))  # D: 1.5 s behind P
    assert list(flt.filter(CycleState(), ask, [D, P])) == [D, P]  # the gate breaks stickiness
