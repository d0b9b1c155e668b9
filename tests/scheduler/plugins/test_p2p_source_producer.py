"""p2p-source-producer (llm-d's test cases)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix import p2p_source
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.plugins.prefix.p2p_source import (
    KV_CACHE_SOURCE_HEADER,
    P2PSourceProducer,
    choose_source,
    fnv32a,
)
from scheduler.plugins.scorers.running_requests import RunningRequestsSizeScorer
from scheduler.types import Endpoint, LLMRequest, Metrics, ProfileResult, SchedulingResult, ScoredEndpoint

BS = 16


def match(**blocks: int) -> PrefixMatch:
    matched = {f"10.0.0.{k[1:]}:8080": v for k, v in blocks.items()}
    return PrefixMatch(tuple(range(10)), MappingProxyType(matched), BS, "prefix-cache-scorer")


def ep(n: int, queue: int = 0) -> Endpoint:
    return Endpoint(f"10.0.0.{n}:8080", metrics=Metrics(waiting_queue_size=queue))


def test_fnv32a_matches_go() -> None:
    assert fnv32a("") == 0x811C9DC5
    assert fnv32a("a") == 0xE40C292C


def test_factory() -> None:
    plugin = p2p_source.factory("p", {}, PluginHandle())
    assert plugin.params == p2p_source.P2PSourceParams(1, "prefill", "")
    with pytest.raises(ConfigError, match=r"parameters\.minCachedTokenDelta"):
        p2p_source.factory("p", {"minCachedTokenDelta": 0}, PluginHandle())
    with pytest.raises(ConfigError, match="no plugin named 'missing'"):
        p2p_source.factory("p", {"prefixMatchInfoProducerName": "missing"}, PluginHandle())
    handle = PluginHandle()
    handle.add(RunningRequestsSizeScorer("scorer"))
    with pytest.raises(ConfigError, match="does not prepare a prefix match"):
        p2p_source.factory("p", {"prefixMatchInfoProducerName": "scorer"}, handle)


def draws(m: PrefixMatch, endpoints: list[Endpoint], n: int, prefix: str) -> dict[str, int]:
    picks: dict[str, int] = {}
    for i in range(n):
        chosen = choose_source(m, endpoints, f"{prefix}-{i}")
        assert chosen is not None
        picks[chosen[0]] = picks.get(chosen[0], 0) + 1
    return picks


def test_no_cached_blocks_no_source() -> None:
    assert choose_source(match(), [ep(1), ep(2)], "r") is None


def test_shares_by_inverse_queue_weight() -> None:
    picks = draws(match(e1=3, e2=3, e3=3), [ep(1, 12), ep(2, 2), ep(3, 7)], 400, "req")
    assert picks["10.0.0.2:8080"] > picks["10.0.0.3:8080"] > picks["10.0.0.1:8080"] > 0


def test_near_tie_no_herding() -> None:
    picks = draws(match(e1=3, e2=3), [ep(1, 0), ep(2, 1)], 600, "near")
    assert picks["10.0.0.1:8080"] > picks["10.0.0.2:8080"] > 100


def test_beyond_band_wins_over_idle() -> None:
    assert choose_source(match(e1=5, e2=3), [ep(1, 20), ep(2, 0)], "req-strict") == ("10.0.0.1:8080", 5 * BS)


def test_one_block_short_shares_by_queue() -> None:
    m, pool = match(e1=4, e2=3), [ep(1, 20), ep(2, 0)]
    picks = draws(m, pool, 400, "band")
    assert picks["10.0.0.2:8080"] > picks["10.0.0.1:8080"] > 0
    assert choose_source(m, pool, "band-1") in {("10.0.0.1:8080", 4 * BS), ("10.0.0.2:8080", 3 * BS)}


def test_equal_queues_spread_by_request_id() -> None:
    m, pool = match(e1=3, e2=3, e3=3), [ep(1), ep(2), ep(3)]
    assert len(draws(m, pool, 64, "req")) == 3
    assert choose_source(m, pool, "req-7") == choose_source(m, pool, "req-7")


def result(primary: str, prefill: str | None = None) -> SchedulingResult:
    results = {"decode": ProfileResult("decode", (ScoredEndpoint(Endpoint(primary), 1.0),))}
    if prefill is not None:
        results["prefill"] = ProfileResult("prefill", (ScoredEndpoint(Endpoint(prefill), 1.0),))
    return SchedulingResult("decode", (Endpoint(primary),), results)


def headers(
    plugin: P2PSourceProducer, m: PrefixMatch | None, pool: list[Endpoint], res: SchedulingResult
) -> object:
    cycle = CycleState()
    if m is not None:
        cycle.write(PREFIX_MATCH, m)
    request = LLMRequest(request_id="r", model="m", target_model="m")
    plugin.prepare(cycle, request, pool)
    return plugin.request_headers(cycle, request, res)


def test_request_headers() -> None:
    plugin = P2PSourceProducer("p")
    pool = [ep(1), ep(2), ep(3)]
    assert headers(plugin, match(e1=5, e2=1), pool, result("10.0.0.2:8080")) == {
        KV_CACHE_SOURCE_HEADER: "10.0.0.1:8080"
    }
    assert headers(plugin, match(e1=5), pool, result("10.0.0.1:8080")) == {}  # the source computes
    assert headers(plugin, None, pool, result("10.0.0.2:8080")) == {}  # no prefix match
    # prefill computes when it ran: the source is the prefill endpoint itself -> no header
    assert headers(plugin, match(e1=5), pool, result("10.0.0.2:8080", prefill="10.0.0.1:8080")) == {}
    # a third endpoint holds the most: header even though prefill ran
    assert headers(plugin, match(e3=5, e1=1), pool, result("10.0.0.2:8080", prefill="10.0.0.1:8080")) == {
        KV_CACHE_SOURCE_HEADER: "10.0.0.3:8080"
    }
    strict = P2PSourceProducer("p", p2p_source.P2PSourceParams(min_cached_token_delta=2 * BS))
    assert headers(strict, match(e1=5, e2=4), pool, result("10.0.0.2:8080")) == {}  # delta one block
    named = P2PSourceProducer("p", p2p_source.P2PSourceParams(prefill_profile_name="pf"))
    res = result("10.0.0.2:8080")
    res = SchedulingResult(
        "decode",
        res.endpoints,
        {**res.profile_results, "pf": ProfileResult("pf", (ScoredEndpoint(ep(1), 1.0),))},
    )
    assert headers(named, match(e1=5), pool, res) == {}


def test_through_the_scheduler_with_the_prefix_cache_scorer() -> None:
    from scheduler.config import load_config_text
    from scheduler.scheduler import Scheduler

    text = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: p2p-source-producer
  parameters: {prefixMatchInfoProducerName: prefix-cache-scorer}
- type: prefix-cache-scorer
  parameters: {blockSizeTokens: 4}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
"""
    resolved = load_config_text(text)
    names = [r.plugin.name for r in resolved.plugins]
    assert names.index("prefix-cache-scorer") < names.index("p2p-source-producer")  # built first
    scheduler = Scheduler(resolved.profiles, resolved.handler, [r.plugin for r in resolved.plugins])
    warm, idle = ep(1, queue=5), ep(2, queue=0)
    prompt = "the same long prompt " * 40
    first = LLMRequest(request_id="a", model="m", target_model="m", prompt_text=prompt)
    routed = scheduler.schedule(first, [warm])
    scheduler.dispatched(first, routed)  # warm now holds the prefix
    second = LLMRequest(request_id="b", model="m", target_model="m", prompt_text=prompt)
    result = scheduler.schedule(second, [warm, idle])
    assert result.addresses == (idle.address,)  # queue-scorer alone routes to the idle endpoint
    assert result.headers == {KV_CACHE_SOURCE_HEADER: warm.address}
