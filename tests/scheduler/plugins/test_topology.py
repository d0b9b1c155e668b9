"""topology-extractor, topology-affinity-filter and -scorer (llm-d's test tables)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins import topology
from scheduler.plugins.handlers.disagg import PEER_ENDPOINT
from scheduler.plugins.scorers.running_requests import RunningRequestsSizeScorer
from scheduler.plugins.topology import (
    HOST,
    NONE,
    RACK,
    REGION,
    ZONE,
    Topology,
    TopologyAffinityFilter,
    TopologyAffinityScorer,
    TopologyExtractor,
    compare,
)
from scheduler.types import Endpoint, LLMRequest

REQ = LLMRequest(request_id="r", model="m", target_model="m")
H, R, Z, G = (
    "kubernetes.io/hostname",
    "topology.kubernetes.io/rack",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)


def ep(name: str, host: str = "", rack: str = "", zone: str = "", region: str = "") -> Endpoint:
    labels = {k: v for k, v in ((H, host), (R, rack), (Z, zone), (G, region)) if v}
    return Endpoint(f"{name}:8000", name=name, labels=labels)


PEER = ep("peer", "h1", "r1", "z1", "reg1")
SAME_HOST = ep("same-host", "h1", "r1", "z1", "reg1")
SAME_RACK = ep("same-rack", "h2", "r1", "z1", "reg1")
SAME_ZONE = ep("same-zone", "h2", "r2", "z1", "reg1")
SAME_REGION = ep("same-region", "h2", "r2", "z2", "reg1")
NO_MATCH = ep("no-match", "h2", "r2", "z2", "reg2")
BARE = Endpoint("bare:8000")


def with_peer(peer: Endpoint | None = PEER) -> CycleState:
    cycle = CycleState()
    if peer is not None:
        cycle.write(PEER_ENDPOINT, peer)
    return cycle


def handle() -> PluginHandle:
    h = PluginHandle()
    h.add(TopologyExtractor("topology-extractor"))
    return h


def make_filter(min_affinity: str = "host") -> TopologyAffinityFilter:
    plugin = topology.filter_factory("f", {"minAffinity": min_affinity}, handle())
    assert isinstance(plugin, TopologyAffinityFilter)
    return plugin


def names(endpoints: Any) -> list[str]:
    return [e.name for e in endpoints]


@pytest.mark.parametrize(
    ("a", "b", "level"),
    [
        (Topology("h1", "r1", "z1", "reg1"), Topology("h1", "r1", "z1", "reg1"), HOST),
        (Topology("h1", "r1"), Topology("h2", "r1"), RACK),
        (Topology(zone="z1"), Topology(zone="z1", region="x"), ZONE),
        (Topology(region="g"), Topology(region="g"), REGION),
        (Topology(), Topology(), NONE),  # empty never matches empty
        (Topology("h1"), None, NONE),
    ],
)
def test_compare(a: Topology, b: Topology | None, level: int) -> None:
    assert compare(a, b) == level


def test_extractor_reads_labels() -> None:
    assert TopologyExtractor("t").topology(SAME_RACK) == Topology("h2", "r1", "z1", "reg1")
    assert TopologyExtractor("t").topology(BARE) is None
    custom = topology.extractor_factory("t", {"hostname": "my/hostname", "zone": ""}, PluginHandle())
    assert isinstance(custom, TopologyExtractor)
    labelled = Endpoint("x:1", labels={"my/hostname": "n1", Z: "z9"})
    assert custom.topology(labelled) == Topology(hostname="n1", zone="z9")  # empty key = default


def test_filter_levels() -> None:
    pool = [SAME_HOST, SAME_RACK, NO_MATCH]
    assert names(make_filter("host").filter(with_peer(), REQ, pool)) == ["same-host"]
    assert names(make_filter("rack").filter(with_peer(), REQ, pool)) == ["same-host", "same-rack"]
    rack_only = ep("rack-only", rack="r1")
    assert names(make_filter("rack").filter(with_peer(), REQ, [rack_only])) == ["rack-only"]
    assert names(make_filter("host").filter(with_peer(), REQ, [rack_only, SAME_HOST])) == ["same-host"]


def test_filter_fails_open() -> None:
    lonely = [ep("a", "h2")]
    assert names(make_filter().filter(with_peer(ep("p", "h1")), REQ, lonely)) == ["a"]  # nothing qualifies
    pool = [ep("a", "h1"), ep("b", "h2")]
    assert names(make_filter().filter(with_peer(None), REQ, pool)) == ["a", "b"]  # no peer
    assert names(make_filter().filter(with_peer(BARE), REQ, pool)) == ["a", "b"]  # peer without topology
    assert names(make_filter().filter(with_peer(ep("p", "h1")), REQ, [BARE, ep("s", "h1")])) == ["s"]


def test_scorer() -> None:
    scorer = topology.scorer_factory("s", {}, handle())
    assert isinstance(scorer, TopologyAffinityScorer)
    pool = [SAME_HOST, SAME_RACK, SAME_ZONE, SAME_REGION, NO_MATCH, BARE]
    assert scorer.score(with_peer(), REQ, pool) == [1.0, 0.2, 0.05, 0.02, 0.0, 0.0]
    assert scorer.score(with_peer(None), REQ, pool[:2]) == [0.0, 0.0]


def test_without_extractor_inert_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="scheduler.plugins"):
        plugin = topology.filter_factory("f", {}, PluginHandle())
    assert "inert" in caplog.text
    assert isinstance(plugin, TopologyAffinityFilter)
    assert names(plugin.filter(with_peer(), REQ, [SAME_RACK, NO_MATCH])) == ["same-rack", "no-match"]


def test_validation() -> None:
    with pytest.raises(ConfigError, match=r"parameters\.minAffinity"):
        topology.filter_factory("f", {"minAffinity": "datacenter"}, handle())
    h = handle()
    h.add(RunningRequestsSizeScorer("scorer"))
    with pytest.raises(ConfigError, match="is not a topology-extractor"):
        topology.scorer_factory("s", {"topologyProducerName": "scorer"}, h)
    with pytest.raises(ConfigError, match=r"parameters\.rack"):
        topology.extractor_factory("t", {"rack": 3}, PluginHandle())


# llm-d-router deploy/config/pd-topology-epp-config.yaml (its approx-prefix-cache-producer left out).
PD_TOPOLOGY = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-scorer
- type: queue-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: topology-affinity-filter
- type: topology-affinity-scorer
- type: topology-extractor
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: always-disagg-pd-decider
- type: always-disagg-pd-decider
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: topology-affinity-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
    weight: 1
  - pluginRef: topology-affinity-scorer
    weight: 1
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: queue-scorer
    weight: 1
"""


def test_prefill_lands_next_to_the_decode_pick() -> None:
    from scheduler.plugins.filters.roles import ROLE_LABEL
    from scheduler.scheduler import Scheduler

    resolved = load_config_text(PD_TOPOLOGY)
    scheduler = Scheduler(resolved.profiles, resolved.handler, [r.plugin for r in resolved.plugins])
    decode = Endpoint("10.0.0.1:8000", labels={ROLE_LABEL: "decode", H: "h1", R: "r1"})
    far = Endpoint("10.0.0.2:8000", labels={ROLE_LABEL: "prefill", H: "h9", R: "r9"})
    near = Endpoint("10.0.0.3:8000", labels={ROLE_LABEL: "prefill", H: "h1", R: "r1"})
    result = scheduler.schedule(REQ, [decode, far, near])
    assert result.headers["x-prefiller-host-port"] == near.address
