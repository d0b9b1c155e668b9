"""precise-prefix-cache-scorer / -producer: parameters, exact matching from events, routing, lifecycle."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.precise.params import parse_precise_params
from scheduler.plugins.precise.producer import PrecisePrefixCacheProducer
from scheduler.plugins.precise.scorer import PrecisePrefixCacheScorer, factory
from scheduler.plugins.prefix.match import prefix_match
from scheduler.plugins.tokens.producer import pack_bytes
from scheduler.types import Endpoint, LLMRequest, ProfileResult, SchedulingResult, ScoredEndpoint

EPS = [Endpoint(f"10.0.0.{i}:8000") for i in range(3)]
PROMPT = "".join(chr(65 + i) * 64 for i in range(8))  # 128 pseudo-tokens of the estimate backend

SCORER_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: precise-prefix-cache-scorer
  parameters:
    tokenProcessorConfig: {blockSize: 16, hashSeed: "42"}
    speculativeIndexing: %s
- type: max-score-picker
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: precise-prefix-cache-scorer
  - pluginRef: max-score-picker
"""

PAIR_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSizeTokens: 16, hashSeed: "42"}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
"""


def req(text: str = PROMPT, rid: str = "r") -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=text)


def announce(
    plugin: PrecisePrefixCacheProducer, source: str, blocks: int, seq: int = 0, medium: str = "GPU"
) -> None:
    """``source`` publishes BlockStored for the first ``blocks`` blocks of PROMPT (its token ids)."""
    keys = plugin.keyer.keys(pack_bytes(PROMPT.encode()))[:blocks]
    plugin.ingester.ingest(source, seq, [0.0, [["BlockStored", keys, None, [], 16, None, medium, None]]])


def plugin_of(text: str, kind: type) -> Any:
    resolved = load_config_text(text)
    scheduler = resolved.build_scheduler()
    found = [p.plugin for p in resolved.plugins if isinstance(p.plugin, kind)]
    return scheduler, found[0]


def test_routes_to_the_endpoint_holding_the_longest_prefix() -> None:
    scheduler, plugin = plugin_of(SCORER_CONFIG % "false", PrecisePrefixCacheScorer)
    announce(plugin, EPS[1].address, 3)
    announce(plugin, EPS[2].address, 6)
    assert scheduler.schedule(req(), EPS).primary.address == EPS[2].address
    cycle = CycleState()
    plugin.prepare(cycle, req(), EPS)
    assert plugin.score(cycle, req(), EPS) == pytest.approx([0.0, 3 / 8, 6 / 8])
    match = prefix_match(cycle)  # published for the other prefix consumers (affinity, P/D deciders)
    assert match is not None and match.blocks(EPS[2].address) == 6 and match.total_blocks == 8


def test_cpu_tier_weighs_less() -> None:
    _, plugin = plugin_of(SCORER_CONFIG % "false", PrecisePrefixCacheScorer)
    announce(plugin, EPS[0].address, 8, medium="CPU")
    announce(plugin, EPS[1].address, 8)
    cycle = CycleState()
    plugin.prepare(cycle, req(), EPS)
    assert plugin.score(cycle, req(), EPS) == pytest.approx([0.8, 1.0, 0.0])


def test_central_mode_topic_id_is_the_pod_ip() -> None:
    _, plugin = plugin_of(SCORER_CONFIG % "false", PrecisePrefixCacheScorer)
    announce(plugin, "10.0.0.1", 4)  # kv@10.0.0.1@model: every endpoint of that IP
    cycle = CycleState()
    plugin.prepare(cycle, req(), EPS)
    assert plugin.score(cycle, req(), EPS)[1] == pytest.approx(0.5)


def test_producer_feeds_prefix_cache_scorer() -> None:
    scheduler, plugin = plugin_of(PAIR_CONFIG, PrecisePrefixCacheProducer)
    announce(plugin, EPS[0].address, 8)
    result = scheduler.schedule(req(), EPS)
    assert result.primary.address == EPS[0].address


def test_removed_endpoint_and_restart_drop_blocks() -> None:
    _, plugin = plugin_of(SCORER_CONFIG % "false", PrecisePrefixCacheScorer)
    announce(plugin, EPS[0].address, 8, seq=4)
    announce(plugin, EPS[0].address, 2, seq=0)  # seq went back: the server restarted
    cycle = CycleState()
    plugin.prepare(cycle, req(), EPS)
    assert plugin.score(cycle, req(), EPS)[0] == pytest.approx(2 / 8)
    plugin.on_endpoints_removed(frozenset({EPS[0].address}))
    cycle = CycleState()
    plugin.prepare(cycle, req(), EPS)
    assert plugin.score(cycle, req(), EPS)[0] == 0.0


def test_speculative_indexing_until_ttl() -> None:
    now = [0.0]
    params = parse_precise_params({"speculativeIndexing": True, "speculativeTTL": "2s"}, "t", "n")
    from scheduler.plugins.tokens.params import TokenProducerParams
    from scheduler.plugins.tokens.producer import TokenProducer

    plugin = PrecisePrefixCacheScorer("p", params, lambda: now[0])
    plugin.token_source = TokenProducer("token-producer", TokenProducerParams())

    def score() -> list[float]:
        cycle = CycleState()
        plugin.prepare(cycle, req(), EPS)
        return plugin.score(cycle, req(), EPS)

    assert score() == [0.0, 0.0, 0.0]
    target = ScoredEndpoint(EPS[2], 1.0)
    plugin.on_dispatched(
        req(), SchedulingResult("default", (EPS[2],), {"default": ProfileResult("default", (target,))})
    )
    assert score() == [0.0, 0.0, 1.0]
    now[0] = 2.5
    assert score() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("parameters", "field", "expect"),
    [
        (
            {"tokenProcessorConfig": {"hashAlgorithm": "cbor-fnv"}},
            "tokenProcessorConfig.hashAlgorithm",
            "servers'",
        ),
        ({"tokenProcessorConfig": {"blockSize": -1}}, "tokenProcessorConfig.blockSize", "integer"),
        ({"kvEventsConfig": {"zmqEndpoint": "5557"}}, "kvEventsConfig.zmqEndpoint", "ZMQ endpoint"),
        ({"kvEventsConfig": {"engineType": "sglang"}}, "kvEventsConfig.engineType", "vllm"),
        ({"indexerConfig": {"kvBlockIndexConfig": {"redisConfig": {}}}}, "redisConfig", "in-memory"),
        (
            {"indexerConfig": {"kvBlockIndexConfig": {"inMemoryConfig": {"podCacheSize": 10}}}},
            "inMemoryConfig.podCacheSize",
            "no counterpart",
        ),
        ({"indexerConfig": {"tokenizersPoolConfig": {}}}, "tokenizersPoolConfig.modelName", "base model"),
        ({"indexerConfig": {"kvCacheBackendConfigs": [{"name": "gpu", "weight": 2}]}}, "weight", "[0, 1]"),
        ({"speculativeTTL": "soon"}, "speculativeTTL", "duration"),
        ({"bogus": 1}, "bogus", "unknown parameter"),
        ({"kvEventsConfig": {"discoverPods": False}}, "discoverPods", "zmqEndpoint"),
    ],
)
def test_bad_parameters_name_the_field(parameters: dict[str, Any], field: str, expect: str) -> None:
    with pytest.raises(ConfigError) as err:
        factory("p", parameters, PluginHandle())
    assert field in str(err.value) and expect in str(err.value)


def test_llm_d_parameter_forms() -> None:
    p = parse_precise_params(
        {
            "indexerConfig": {
                "tokenProcessorConfig": {"blockSize": 5},
                "kvBlockIndexConfig": {
                    "maxPrefixBlocksToMatch": 256,
                    "metricsLoggingInterval": 6_000_000_000,
                },
            },
            "kvEventsConfig": {
                "zmqEndpoint": "tcp://0.0.0.0:5557",
                "podDiscoveryConfig": {"socketPort": 6000},
            },
        },
        "t",
        "n",
    )
    assert (p.block_size, p.max_prefix_blocks, p.metrics_logging_interval) == (5, 256, 6.0)
    assert (p.events.zmq_endpoint, p.events.socket_port) == ("tcp://0.0.0.0:5557", 6000)
    assert parse_precise_params({"tokenProcessorConfig": {"hashSeed": 42}}, "t", "n").hash_seed == "42"
