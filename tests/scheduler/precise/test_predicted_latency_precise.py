"""predicted-latency-producer fed by the precise, KV-event-fed index (prefixMatchInfoProducerName), with
the affinity filter still on the approximate index (deploy/configs/predicted-latency-precise.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from epp.config.sections import load_picker_config
from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.plugins.latency.producer import PredictedLatencyProducer
from scheduler.plugins.precise.producer import PrecisePrefixCacheProducer
from scheduler.plugins.prefix.matcher import PrefixMatcher
from scheduler.plugins.tokens.producer import pack_bytes
from scheduler.types import Endpoint, LLMRequest, SchedulingResult

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "deploy" / "configs" / "predicted-latency-precise.yaml"
EPS = [Endpoint(f"10.0.0.{i}:8000") for i in range(3)]
PROMPT = "".join(chr(65 + i) * 64 for i in range(8))  # 128 tokens: 8 blocks of 16 (estimate backend)

CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSize: 16, hashSeed: "42"}
- type: approx-prefix-cache-producer
  parameters: {autoTune: false}
- type: predicted-latency-producer
  parameters: {streamingMode: true%s}
- type: prefix-cache-affinity-filter
  parameters: {ttftSource: latencyPredictor}
- type: latency-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-affinity-filter
  - pluginRef: latency-scorer
  - pluginRef: max-score-picker
"""
PRECISE_SOURCE = ", prefixMatchInfoProducerName: precise-prefix-cache-producer"


def req(rid: str = "r") -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=PROMPT, token_estimate=128)


def build(text: str) -> tuple[Any, dict[str, Any]]:
    resolved = load_config_text(text)
    scheduler = resolved.build_scheduler()
    return scheduler, {p.plugin.name: p.plugin for p in resolved.plugins}


def event(plugin: PrecisePrefixCacheProducer, source: str, kind: str, blocks: int, seq: int) -> None:
    """``source`` publishes ``kind`` (BlockStored / BlockRemoved) for PROMPT's first ``blocks`` blocks."""
    keys = plugin.keyer.keys(pack_bytes(PROMPT.encode()))[:blocks]
    body = (
        ["BlockStored", keys, None, [], 16, None, "GPU", None]
        if kind == "BlockStored"
        else [kind, keys, "GPU"]
    )
    plugin.ingester.ingest(source, seq, [0.0, [body]])


def uncached(producer: PredictedLatencyProducer, scheduler: Any) -> list[int]:
    """The model's uncached-tokens feature of ``req()`` on each endpoint, as one scheduling cycle sees it."""
    cycle = CycleState()
    for plugin, _ in scheduler._prepare_t:  # the cycle's producers, in configuration order
        plugin.prepare(cycle, req(), EPS)
    match = producer.prefix_match_for(cycle, req())
    return [producer.features(req(), e, match).uncached_tokens for e in EPS]


def test_shipped_profile_feeds_the_model_from_the_precise_index_and_affinity_from_the_approximate() -> None:
    resolved = load_picker_config(str(SHIPPED), None).config
    resolved.build_scheduler()
    plugins: dict[str, Any] = {p.plugin.name: p.plugin for p in resolved.plugins}
    precise, approx = plugins["precise-prefix-cache-producer"], plugins["approx-prefix-cache-producer"]
    assert isinstance(precise, PrecisePrefixCacheProducer) and isinstance(approx, PrefixMatcher)
    assert plugins["predicted-latency-producer"].producer is precise
    assert plugins["prefix-cache-affinity-filter"].producer is approx
    assert plugins["latency-scorer"].producer is approx
    rendered = resolved.render()
    assert "prefixMatchInfoProducerName: precise-prefix-cache-producer" in rendered


def test_the_models_cached_tokens_follow_evictions_only_with_the_precise_source() -> None:
    for source, after_eviction in (("", [0, 128, 128]), (PRECISE_SOURCE, [128, 128, 128])):
        scheduler, plugins = build(CONFIG % source)
        producer, precise = plugins["predicted-latency-producer"], plugins["precise-prefix-cache-producer"]
        event(precise, EPS[0].address, "BlockStored", 8, seq=0)
        result: SchedulingResult = scheduler.schedule(req(), EPS)
        scheduler.dispatched(req(), result)  # the approximate index now believes EPS[0] holds the prompt
        assert result.primary.address == EPS[0].address
        scheduler.response_chunk(req(), result, b"data: {}")  # its first token: it was admitted there
        event(precise, EPS[0].address, "BlockRemoved", 8, seq=1)  # ... and the server evicted it since
        assert uncached(producer, scheduler) == after_eviction, source


def test_a_prompt_sent_and_not_yet_past_its_first_token_counts_as_cached_where_it_went() -> None:
    scheduler, plugins = build(CONFIG % PRECISE_SOURCE)
    producer = plugins["predicted-latency-producer"]
    first = req("first")
    result: SchedulingResult = scheduler.schedule(first, EPS)
    scheduler.dispatched(first, result)
    target = EPS.index(next(e for e in EPS if e.address == result.primary.address))
    # no KV event yet (the server has not admitted it): a follower of the same prompt is predicted
    # cached on that server, where it will queue behind the first and hit its blocks
    expected = [128, 128, 128]
    expected[target] = 0
    assert uncached(producer, scheduler) == expected
    scheduler.response_chunk(first, result, b"data: {}")  # admitted: from now on its events tell
    assert uncached(producer, scheduler) == [128, 128, 128]
    assert producer._awaiting_blocks == {}


def test_precise_source_counts_a_held_prefix_the_approximate_index_never_routed() -> None:
    scheduler, plugins = build(CONFIG % PRECISE_SOURCE)
    producer, precise = plugins["predicted-latency-producer"], plugins["precise-prefix-cache-producer"]
    event(precise, EPS[2].address, "BlockStored", 5, seq=0)  # another picker's request warmed EPS[2]
    assert uncached(producer, scheduler) == [128, 128, 128 - 5 * 16]


def test_a_consumer_reading_the_precise_match_before_its_prepare_sees_the_last_pool() -> None:
    scheduler, plugins = build(CONFIG % PRECISE_SOURCE)
    producer, precise = plugins["predicted-latency-producer"], plugins["precise-prefix-cache-producer"]
    event(precise, EPS[1].address, "BlockStored", 8, seq=0)
    # before any cycle the pool is unknown: nothing matched
    assert producer.prefix_match_for(CycleState(), req()).blocks(EPS[1].address) == 0
    scheduler.schedule(req("first"), EPS)
    # latency-slo-admitter predicts on a cycle state of its own, before scheduling: the last pool's match
    match = producer.prefix_match_for(CycleState(), req())
    assert match.blocks(EPS[1].address) == 8 and match.blocks(EPS[0].address) == 0


def test_the_prompt_is_counted_in_the_matchs_tokens_when_it_has_the_ids() -> None:
    scheduler, plugins = build(CONFIG % PRECISE_SOURCE)
    producer, precise = plugins["predicted-latency-producer"], plugins["precise-prefix-cache-producer"]
    event(precise, EPS[0].address, "BlockStored", 8, seq=0)
    estimated = LLMRequest(
        request_id="e", model="m", target_model="m", prompt_text=PROMPT, token_estimate=300
    )
    cycle = CycleState()
    for plugin, _ in scheduler._prepare_t:
        plugin.prepare(cycle, estimated, EPS)
    match = producer.prefix_match_for(cycle, estimated)
    assert match.prompt_tokens == 128  # the rendered ids, not the request's estimate of 300
    features = [producer.features(estimated, e, match) for e in EPS]
    assert [(f.input_tokens, f.uncached_tokens) for f in features] == [(128, 0), (128, 128), (128, 128)]
    # without ids (the approximate index hashing characters) the estimate stays the prompt's length
    assert producer.features(estimated, EPS[0], None).input_tokens == 300
