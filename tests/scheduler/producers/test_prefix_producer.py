"""The producer model for prefix matching: approx-prefix-cache-producer and prefix-cache-scorer as a consumer.

Tables ported from llm-d-router (commit ebab68792):
pkg/epp/framework/plugins/scheduling/scorer/prefix/plugin_test.go (TestPrefixPluginScore,
TestPrefixPluginScoreWithWeights, TestPrefixPluginFactoryValidation) and
pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/plugin_test.go
(TestGetBlockSize_*, TestMaxPrefixTokensToMatch, TestFactory_DeprecatedBlockSizeMapped,
TestFactory_RejectsUnknownField, TestDataProducerValidation).
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix.match import PrefixMatch
from scheduler.plugins.prefix.matcher import PrefixMatcher
from scheduler.plugins.prefix.params import PrefixCacheParams
from scheduler.plugins.prefix.producer import ApproxPrefixCacheProducer
from scheduler.plugins.prefix.producer import factory as producer_factory
from scheduler.plugins.prefix.scorer import PrefixCacheScorer
from scheduler.plugins.prefix.scorer import factory as scorer_factory
from scheduler.types import Endpoint, LLMRequest, Metrics, ProfileResult, SchedulingResult, ScoredEndpoint

NEW = "llm-d.ai/v1alpha1"
OLD = "inference.networking.x-k8s.io/v1alpha1"


class FixedProducer(PrefixMatcher):
    """A producer whose match is given (stands in for upstream's endpoint.Put of match info)."""

    plugin_type = "approx-prefix-cache-producer"

    def __init__(self, found: PrefixMatch) -> None:
        super().__init__("approx-prefix-cache-producer", PrefixCacheParams())
        self.found = found

    def match(self, cycle: CycleState, request: LLMRequest) -> PrefixMatch:
        return self.found


def consumer(parameters: dict[str, Any], found: PrefixMatch) -> PrefixCacheScorer:
    scorer = scorer_factory("s", parameters, PluginHandle())
    assert isinstance(scorer, PrefixCacheScorer)
    (need,) = scorer.data_needs()
    scorer.bind_producer(need.key, FixedProducer(found))
    return scorer


def request(text: str = "x", rid: str = "r") -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=text)


def fake_match(matched: dict[str, int], total: int, block: int) -> PrefixMatch:
    return PrefixMatch(tuple(range(total)), matched, block, "approx-prefix-cache-producer")


A, B = Endpoint("10.0.0.1:8000"), Endpoint("10.0.0.2:8000")


def test_score_is_match_ratio() -> None:  # TestPrefixPluginScore
    scorer = consumer({}, fake_match({A.address: 5, B.address: 2}, 10, 1))
    assert scorer.score(CycleState(), request(), [A, B]) == [0.5, 0.2]


def test_score_with_match_length_weight() -> None:  # TestPrefixPluginScoreWithWeights
    params = {"matchLengthWeight": 0.5, "matchLengthScaleTokens": 100}
    one = consumer(params, fake_match({A.address: 5}, 10, 1)).score(CycleState(), request(), [A])
    two = consumer(params, fake_match({A.address: 50}, 100, 1)).score(CycleState(), request(), [A])
    assert one[0] == pytest.approx(0.25125)
    assert two[0] == pytest.approx(0.375)


def test_missing_match_scores_zero() -> None:  # TestPrefixPluginScoreMixedMissingMatchInfo
    scorer = consumer({}, fake_match({A.address: 5}, 10, 1))
    assert scorer.score(CycleState(), request(), [A, B]) == [0.5, 0.0]


@pytest.mark.parametrize(
    ("parameters", "weight", "scale"),
    [
        ({}, 0.0, 8192),
        ({"matchLengthWeight": 0.5, "matchLengthScaleTokens": 100}, 0.5, 100),
        ({"matchLengthWeight": 0.5}, 0.5, 8192),
        ({"matchLengthWeight": 0.0}, 0.0, 8192),
    ],
)
def test_scorer_factory_valid(parameters: dict[str, Any], weight: float, scale: int) -> None:
    scorer = scorer_factory("s", parameters, PluginHandle())
    assert isinstance(scorer, PrefixCacheScorer)
    assert (scorer.scoring.match_length_weight, scorer.scoring.match_length_scale_tokens) == (weight, scale)


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"matchLengthWeight": -0.1, "matchLengthScaleTokens": 100}, "matchLengthWeight"),
        ({"matchLengthWeight": 1.1, "matchLengthScaleTokens": 100}, "matchLengthWeight"),
        ({"matchLengthWeight": 0.5, "matchLengthScaleTokens": 0}, "parameters"),
        ({"prefixMatchInfoProducerName": "p", "lruCapacityPerServer": 1000}, "lruCapacityPerServer"),
    ],
)
def test_scorer_factory_invalid(parameters: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        scorer_factory("s", parameters, PluginHandle())
    assert field in str(err.value)


# -- approx-prefix-cache-producer ------------------------------------------------------------------


def producer(**parameters: Any) -> ApproxPrefixCacheProducer:
    plugin = producer_factory("approx-prefix-cache-producer", parameters, PluginHandle())
    assert isinstance(plugin, ApproxPrefixCacheProducer)
    return plugin


def with_block_size(size: int) -> Endpoint:
    return Endpoint("10.0.0.9:8000", metrics=Metrics(block_size=size))


@pytest.mark.parametrize(
    ("parameters", "metric", "expected"),
    [
        ({"autoTune": True, "blockSizeTokens": 16}, 16, 64),  # AutotuneClampsBelowMinimum
        ({"autoTune": True, "blockSizeTokens": 16}, 128, 128),  # AutotuneAboveMinimumPassesThrough
        ({"autoTune": False, "blockSizeTokens": 32}, None, 64),  # ManualConfigClampedBelowMinimum
        ({"autoTune": True, "blockSizeTokens": 16}, None, 64),  # AutotuneFallbackClampsLowConfig
        ({"autoTune": False, "blockSizeTokens": 100}, 16, 100),
    ],
)
def test_block_size(parameters: dict[str, Any], metric: int | None, expected: int) -> None:
    plugin = producer(**parameters)
    eps = [with_block_size(metric)] if metric else []
    plugin.prepare(CycleState(), request(), eps)
    assert plugin.block_size_tokens == expected


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({}, 131072 // 64),  # token cap wins by default
        ({"maxPrefixTokensToMatch": 16384, "blockSizeTokens": 128, "autoTune": False}, 128),
        ({"maxPrefixTokensToMatch": 0, "maxPrefixBlocksToMatch": 100}, 100),
        ({"maxPrefixTokensToMatch": 0, "maxPrefixBlocksToMatch": 0, "lruCapacityPerServer": 5000}, 5000),
        ({"maxPrefixTokensToMatch": 32}, 0),  # a token cap below one block hashes nothing
    ],
)
def test_max_blocks(parameters: dict[str, Any], expected: int) -> None:  # TestMaxPrefixTokensToMatch
    assert producer(**parameters).max_blocks() == expected


def test_deprecated_block_size_maps_to_block_size_tokens() -> None:  # TestFactory_DeprecatedBlockSizeMapped
    assert producer(blockSize=128, autoTune=False).block_size_tokens == 128
    assert producer(blockSize=128, blockSizeTokens=256, autoTune=False).block_size_tokens == 256


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"unknownField": 1}, "unknownField"),  # TestFactory_RejectsUnknownField
        ({"autoTune": False, "blockSizeTokens": 0}, "parameters"),  # TestDataProducerValidation
        ({"maxPrefixTokensToMatch": -1}, "maxPrefixTokensToMatch"),
    ],
)
def test_producer_rejects(parameters: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        producer(**parameters)
    assert field in str(err.value)


def test_producer_match_grows_with_dispatch() -> None:  # TestPrefixPluginPrefixGrowth, on characters
    plugin = producer(autoTune=False, blockSizeTokens=64)
    prompt = "".join(chr(65 + i) * 256 for i in range(4))  # 4 blocks of 64 tokens (256 chars)
    cycle = CycleState()
    plugin.prepare(cycle, request(prompt[:512], "r1"), [A, B])
    assert plugin.match(cycle, request(prompt[:512], "r1")).matched == {}
    plugin.on_dispatched(request(prompt[:512], "r1"), dispatch(A))
    found = plugin.match(CycleState(), request(prompt, "r2"))
    assert found.total_blocks == 4 and dict(found.matched) == {A.address: 2}
    assert plugin.produced_keys() == frozenset({"PrefixCacheMatchInfo/approx-prefix-cache-producer"})


def dispatch(ep: Endpoint) -> SchedulingResult:
    return SchedulingResult(
        primary_profile="default",
        endpoints=(ep,),
        profile_results={"default": ProfileResult("default", (ScoredEndpoint(ep, 1.0),))},
        headers={},
    )


# -- wiring through the loader ---------------------------------------------------------------------


def config(api_version: str, plugins: str, profile: str = "  - pluginRef: prefix-cache-scorer\n") -> str:
    return (
        f"apiVersion: {api_version}\nkind: EndpointPickerConfig\nplugins:\n{plugins}"
        f"schedulingProfiles:\n- name: default\n  plugins:\n{profile}"
    )


def test_new_api_version_injects_the_default_producer() -> None:
    resolved = load_config_text(config(NEW, "- type: prefix-cache-scorer\n"))
    scorer = resolved.plugin("prefix-cache-scorer")
    implicit = [r.plugin.name for r in resolved.plugins if r.implicit]
    assert "approx-prefix-cache-producer" in implicit
    assert isinstance(scorer, PrefixCacheScorer)
    assert scorer.producer is resolved.plugin("approx-prefix-cache-producer")


def test_legacy_api_version_keeps_the_scorer_self_contained() -> None:
    resolved = load_config_text(config(OLD, "- type: prefix-cache-scorer\n"))
    scorer = resolved.plugin("prefix-cache-scorer")
    assert isinstance(scorer, PrefixCacheScorer) and scorer.producer is None
    assert "approx-prefix-cache-producer" not in resolved.handle.plugins


@pytest.mark.parametrize("api_version", [OLD, NEW])
def test_configured_producer_is_used_under_both_api_versions(api_version: str) -> None:
    plugins = (
        "- type: prefix-cache-scorer\n"
        "- type: approx-prefix-cache-producer\n  parameters: {lruCapacityPerServer: 5000}\n"
    )
    resolved = load_config_text(config(api_version, plugins))
    scorer = resolved.plugin("prefix-cache-scorer")
    assert isinstance(scorer, PrefixCacheScorer)
    assert scorer.producer is resolved.plugin("approx-prefix-cache-producer")


@pytest.mark.parametrize("api_version", [OLD, NEW])
def test_index_parameters_keep_the_scorer_self_contained(api_version: str) -> None:
    plugins = "- type: prefix-cache-scorer\n  parameters: {maxPrefixBlocksToMatch: 256}\n"
    scorer = load_config_text(config(api_version, plugins)).plugin("prefix-cache-scorer")
    assert isinstance(scorer, PrefixCacheScorer) and scorer.producer is None


def test_named_producers_feed_their_scorers() -> None:  # the README's tiered example
    plugins = (
        "- {name: gpu, type: approx-prefix-cache-producer, parameters: {blockSizeTokens: 64}}\n"
        "- {name: cpu, type: approx-prefix-cache-producer, parameters: {blockSizeTokens: 256}}\n"
        "- {name: gs, type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: gpu}}\n"
        "- {name: cs, type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: cpu}}\n"
    )
    resolved = load_config_text(config(NEW, plugins, "  - pluginRef: gs\n  - pluginRef: cs\n"))
    gs, cs = resolved.plugin("gs"), resolved.plugin("cs")
    assert isinstance(gs, PrefixCacheScorer) and isinstance(cs, PrefixCacheScorer)
    assert gs.producer is resolved.plugin("gpu") and cs.producer is resolved.plugin("cpu")
    assert "approx-prefix-cache-producer" not in resolved.handle.plugins


@pytest.mark.parametrize(
    "plugins",
    [
        "- {type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: nope}}\n",
        "- {type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: queue-scorer}}\n"
        "- {type: queue-scorer}\n",
    ],
)
@pytest.mark.parametrize("api_version", [OLD, NEW])
def test_a_producer_name_that_produces_nothing_is_an_error(api_version: str, plugins: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config_text(config(api_version, plugins))
    assert err.value.location == "plugins[0].parameters.prefixMatchInfoProducerName"
    assert "approx-prefix-cache-producer" in err.value.message


def test_default_producer_name_taken_by_another_plugin_is_an_error() -> None:
    plugins = "- type: prefix-cache-scorer\n- {name: approx-prefix-cache-producer, type: queue-scorer}\n"
    with pytest.raises(ConfigError) as err:
        load_config_text(config(NEW, plugins))
    assert err.value.location == "plugins[1]"


def test_scheduling_through_the_producer_follows_the_prefix() -> None:
    plugins = (
        "- {type: approx-prefix-cache-producer, parameters: {autoTune: false}}\n- type: prefix-cache-scorer\n"
    )
    scheduler = load_config_text(config(NEW, plugins)).build_scheduler()
    for i in range(8):  # a tie is broken at random: 8 prompts all following by luck is 1 in 256
        prompt = chr(65 + i) * 4096
        first = scheduler.schedule(request(prompt, f"a{i}"), [A, B])
        scheduler.dispatched(request(prompt, f"a{i}"), first)
        again = scheduler.schedule(request(prompt, f"b{i}"), [A, B])
        assert again.endpoints[0].address == first.endpoints[0].address


# -- no-hit-lru-scorer as a consumer ---------------------------------------------------------------


def test_no_hit_lru_reads_the_named_producer() -> None:
    from scheduler.plugins.scorers.no_hit_lru import NoHitLruScorer

    plugins = (
        "- {name: p, type: approx-prefix-cache-producer, parameters: {autoTune: false}}\n"
        "- {type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: p}}\n"
        "- {type: no-hit-lru-scorer, parameters: {prefixMatchInfoProducerName: p}}\n"
    )
    profile = "  - pluginRef: prefix-cache-scorer\n  - pluginRef: no-hit-lru-scorer\n"
    resolved = load_config_text(config(NEW, plugins, profile))
    lru = resolved.plugin("no-hit-lru-scorer")
    producer_plugin = resolved.plugin("p")
    assert isinstance(lru, NoHitLruScorer) and isinstance(producer_plugin, ApproxPrefixCacheProducer)
    prompt = "q" * 4096
    cold = lru.score(CycleState(), request(prompt, "c"), [A, B])
    assert cold == [1.0, 0.0]  # cold: least recently used first
    producer_plugin.on_dispatched(request(prompt, "c"), dispatch(A))
    warm = lru.score(CycleState(), request(prompt, "w"), [A, B])
    assert warm == [0.5, 0.5]  # the producer now holds the prefix on A: neutral


def test_no_hit_lru_gets_the_injected_producer_under_the_new_api_version() -> None:
    plugins = "- type: no-hit-lru-scorer\n"
    resolved = load_config_text(config(NEW, plugins, "  - pluginRef: no-hit-lru-scorer\n"))
    assert "approx-prefix-cache-producer" in resolved.handle.plugins
    legacy = load_config_text(config(OLD, plugins, "  - pluginRef: no-hit-lru-scorer\n"))
    assert "approx-prefix-cache-producer" not in legacy.handle.plugins


def test_no_hit_lru_with_a_wrong_producer_name_is_an_error() -> None:
    plugins = "- {type: no-hit-lru-scorer, parameters: {prefixMatchInfoProducerName: missing}}\n"
    with pytest.raises(ConfigError) as err:
        load_config_text(config(NEW, plugins, "  - pluginRef: no-hit-lru-scorer\n"))
    assert err.value.location == "plugins[0].parameters.prefixMatchInfoProducerName"


def test_prefix_cache_affinity_filter_reads_the_named_producer() -> None:
    from scheduler.plugins.filters.prefix_affinity import PrefixAffinityFilter

    plugins = (
        "- {name: p, type: approx-prefix-cache-producer, parameters: {autoTune: false}}\n"
        "- type: prefix-cache-affinity-filter\n"
        "  parameters: {prefixMatchInfoProducerName: p, explorationProbability: 0, maxTTFTPenaltyMs: 0}\n"
    )
    resolved = load_config_text(config(NEW, plugins, "  - pluginRef: prefix-cache-affinity-filter\n"))
    flt = resolved.plugin("prefix-cache-affinity-filter")
    producer_plugin = resolved.plugin("p")
    assert isinstance(flt, PrefixAffinityFilter) and isinstance(producer_plugin, ApproxPrefixCacheProducer)
    assert flt.producer is producer_plugin
    prompt = "f" * 4096
    assert list(flt.filter(CycleState(), request(prompt, "a"), [A, B])) == [A, B]  # nobody holds it
    producer_plugin.on_dispatched(request(prompt, "a"), dispatch(B))
    assert list(flt.filter(CycleState(), request(prompt, "b"), [A, B])) == [B]  # B is sticky now
    with pytest.raises(ConfigError) as err:
        load_config_text(
            config(
                NEW,
                "- {type: prefix-cache-affinity-filter, parameters: {prefixMatchInfoProducerName: x}}\n",
                "  - pluginRef: prefix-cache-affinity-filter\n",
            )
        )
    assert err.value.location == "plugins[0].parameters.prefixMatchInfoProducerName"
