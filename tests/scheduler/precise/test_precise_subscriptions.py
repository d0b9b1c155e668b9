"""Which endpoints a precise prefix plugin subscribes (``podLabelSelector``, ``podNamespace``), and the
figures it records for ``/metrics`` (skipped stores, admissions / evictions, ``enableMetrics`` lookups)."""

from __future__ import annotations

from typing import Any

import pytest
from test_precise_plugins import EPS, PROMPT, SCORER_CONFIG, announce, plugin_of, req

from datalayer.kv_events import kv_event_sources
from datalayer.notifications import EndpointEvent, EndpointEventType
from datalayer.records import EndpointSpec
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.plugins.precise.params import parse_precise_params
from scheduler.plugins.precise.producer import PrecisePrefixCacheProducer
from scheduler.plugins.precise.scorer import PrecisePrefixCacheScorer
from scheduler.plugins.tokens.producer import pack_bytes

ADD, DELETE = EndpointEventType.ADD_OR_UPDATE, EndpointEventType.DELETE


class Transport:
    def __init__(self) -> None:
        self.subscribed: set[str] = set()

    def endpoint_added(self, address: str) -> None:
        self.subscribed.add(address)

    def endpoint_removed(self, address: str) -> None:
        self.subscribed.discard(address)


def producer(events: dict[str, Any]) -> tuple[PrecisePrefixCacheProducer, Transport]:
    params = parse_precise_params({"kvEventsConfig": events}, "precise-prefix-cache-producer", "p")
    plugin = PrecisePrefixCacheProducer("p", params, lambda: 0.0)
    transport = Transport()
    plugin.attach_transport(transport)
    return plugin, transport


def event(kind: EndpointEventType, address: str, **labels: str) -> EndpointEvent:
    return EndpointEvent(
        kind, EndpointSpec(address, address, {k.replace("_", "/"): v for k, v in labels.items()})
    )


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("llm-d.ai/role=prefill", {"a:1"}),
        ("llm-d.ai/role in (prefill,decode)", {"a:1", "b:1"}),
        ("!llm-d.ai/role", {"c:1"}),
        ("", {"a:1", "b:1", "c:1"}),
    ],
)
def test_pod_label_selector_picks_the_subscribed_endpoints(selector: str, expected: set[str]) -> None:
    plugin, transport = producer({"podDiscoveryConfig": {"podLabelSelector": selector}})
    plugin.extract_endpoint(event(ADD, "a:1", **{"llm-d.ai_role": "prefill"}))
    plugin.extract_endpoint(event(ADD, "b:1", **{"llm-d.ai_role": "decode"}))
    plugin.extract_endpoint(event(ADD, "c:1"))
    assert transport.subscribed == expected


def test_an_endpoint_that_stops_matching_is_unsubscribed_and_its_blocks_dropped() -> None:
    plugin, transport = producer({"podDiscoveryConfig": {"podLabelSelector": "llm-d.ai/role=prefill"}})
    address = EPS[0].address
    plugin.extract_endpoint(event(ADD, address, **{"llm-d.ai_role": "prefill"}))
    announce(plugin, address, 4)
    assert transport.subscribed == {address} and plugin.index.size(address) == 4
    plugin.extract_endpoint(event(ADD, address, **{"llm-d.ai_role": "decode"}))
    assert transport.subscribed == set() and plugin.index.size(address) == 0
    plugin.extract_endpoint(event(ADD, address, **{"llm-d.ai_role": "prefill"}))
    assert transport.subscribed == {address}


def test_central_mode_ignores_the_selector() -> None:
    plugin, _ = producer({"zmqEndpoint": "tcp://*:5557", "podDiscoveryConfig": {"podLabelSelector": "x=y"}})
    announce(plugin, EPS[0].address, 4)
    plugin.extract_endpoint(event(ADD, EPS[0].address))  # no labels: still indexed (topic ids decide)
    assert plugin.index.size(EPS[0].address) == 4


@pytest.mark.parametrize("selector", ["llm-d.ai/role===", "a b", "gpu>2", "x in ()"])
def test_a_bad_selector_names_the_field(selector: str) -> None:
    with pytest.raises(
        ConfigError, match=r"kvEventsConfig\.podDiscoveryConfig\.podLabelSelector.*label selector"
    ):
        producer({"podDiscoveryConfig": {"podLabelSelector": selector}})


def test_pod_namespace_other_than_the_pools_is_refused_at_start_up() -> None:
    plugin, _ = producer({"podDiscoveryConfig": {"podNamespace": "models"}})
    with pytest.raises(ConfigError) as err:
        kv_event_sources([plugin], [], namespace="serving")
    message = str(err.value)
    assert "kvEventsConfig.podDiscoveryConfig.podNamespace" in message and "'serving'" in message
    assert "precise-prefix-cache-producer" in message
    assert len(kv_event_sources([plugin], [], namespace="models")) == 1  # the pool's own: fine
    central, _ = producer({"zmqEndpoint": "tcp://*:5557", "podDiscoveryConfig": {"podNamespace": "models"}})
    assert len(kv_event_sources([central], [], namespace="serving")) == 1  # central mode: not per endpoint


def test_concurrency_is_parsed_and_rendered() -> None:
    plugin, _ = producer({"concurrency": 32})
    assert plugin.settings.events.concurrency == 32
    assert plugin.parameters["kvEventsConfig"]["concurrency"] == 32
    with pytest.raises(ConfigError, match=r"kvEventsConfig\.concurrency"):
        producer({"concurrency": 0})


def test_ingest_counts_admissions_evictions_and_skipped_stores() -> None:
    plugin, _ = producer({})
    keys = plugin.keyer.keys(pack_bytes(PROMPT.encode()))[:3]
    plugin.ingester.ingest(
        "a:1",
        0,
        [
            0.0,
            [
                ["BlockStored", keys, None, [], 16, None, "GPU", None],
                ["BlockRemoved", keys[2:], "GPU"],
                ["BlockStored", [7], None, [], 16, None, "GPU", None, None, 1, "mamba"],
                ["BlockStored", [8], None, [], 16, None, "GPU", None, None, 1, "sliding_window"],
                ["BlockStored", [9], None, [], 16, None, "GPU", None, None, 1, "mamba"],
            ],
        ],
    )
    ing = plugin.ingester
    assert (ing.admitted, ing.evicted) == (3, 1)
    assert ing.skipped_stores == {"mamba": 2, "sliding_window": 1}


@pytest.mark.parametrize("enabled", [True, False])
def test_enable_metrics_records_lookups(enabled: bool) -> None:
    config = SCORER_CONFIG % "false"
    if enabled:
        config = config.replace(
            "speculativeIndexing: false",
            "speculativeIndexing: false\n    indexerConfig: {kvBlockIndexConfig: {enableMetrics: true}}",
        )
    _, plugin = plugin_of(config, PrecisePrefixCacheScorer)
    announce(plugin, EPS[1].address, 5)
    announce(plugin, EPS[2].address, 2)
    for i in range(3):
        plugin.prepare(CycleState(), req(rid=f"r{i}"), EPS)
    stats = plugin.lookup_stats
    if not enabled:
        assert stats is None
        return
    assert (stats.lookups, stats.hits) == (3, 15)
    assert sum(stats.buckets) == 3 and stats.seconds > 0
