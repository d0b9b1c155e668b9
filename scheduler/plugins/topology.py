"""Topology (llm-d): ``topology-extractor``, ``topology-affinity-filter``, ``topology-affinity-scorer``.

``topology-extractor`` names where an endpoint runs: hostname, rack, zone and region, read from the
endpoint's (pod's) labels ``hostname`` (default ``kubernetes.io/hostname``), ``rack``
(``topology.kubernetes.io/rack``), ``zone`` (``topology.kubernetes.io/zone``) and ``region``
(``topology.kubernetes.io/region``); an endpoint with none of them has no topology. (llm-d also
falls back to the pod's ``spec.hostname`` from Kubernetes pod notifications; the data layer here
does not carry pod specs, so only labels count; the extractor says so at start.)

Proximity of a candidate to a peer is the tightest level at which both have the same non-empty
value: host, rack, zone, region, else none (an empty value never matches, not even another
empty one). The peer is the endpoint picked by the earlier stage of ``disagg-profile-handler``
(the decode pick before prefill, or the prefill pick before decode in ``prefill-first`` order;
:data:`~scheduler.plugins.handlers.disagg.PEER_ENDPOINT`).

* ``topology-affinity-filter``: keeps the candidates at ``minAffinity`` (``host`` default, ``rack``,
  ``zone``, ``region``) or tighter; candidates without topology are dropped; fails open (keeps all)
  without a peer, without peer topology, or when no candidate qualifies.
* ``topology-affinity-scorer``: host 1.0, rack 0.2, zone 0.05, region 0.02, none / no topology 0.0;
  all 0.0 without a peer topology.

Both read the extractor named ``topologyProducerName`` (default ``topology-extractor``). Without such
an extractor in the configuration they are inert (filter keeps all, scorer scores 0) and say so at
start, as llm-d treats the topology as an optional dependency.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin
from scheduler.params import param, plugin_location
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.handlers.disagg import PEER_ENDPOINT
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "LEVELS",
    "Topology",
    "TopologyAffinityFilter",
    "TopologyAffinityScorer",
    "TopologyExtractor",
    "compare",
    "extractor_factory",
    "filter_factory",
    "scorer_factory",
]

EXTRACTOR_TYPE = "topology-extractor"
HOST, RACK, ZONE, REGION, NONE = range(5)
LEVELS = {"host": HOST, "rack": RACK, "zone": ZONE, "region": REGION}
SCORES = {HOST: 1.0, RACK: 0.2, ZONE: 0.05, REGION: 0.02, NONE: 0.0}
_log = logging.getLogger("scheduler.plugins")


@dataclass(frozen=True, slots=True)
class Topology:
    hostname: str = ""
    rack: str = ""
    zone: str = ""
    region: str = ""


def compare(peer: Topology | None, candidate: Topology | None) -> int:
    """The tightest shared level (HOST .. REGION), NONE when nothing non-empty is shared."""
    if peer is None or candidate is None:
        return NONE
    for level, a, b in (
        (HOST, peer.hostname, candidate.hostname),
        (RACK, peer.rack, candidate.rack),
        (ZONE, peer.zone, candidate.zone),
        (REGION, peer.region, candidate.region),
    ):
        if a and a == b:
            return level
    return NONE


@dataclass(frozen=True, slots=True)
class ExtractorParams:
    hostname: str = param("kubernetes.io/hostname")
    rack: str = param("topology.kubernetes.io/rack")
    zone: str = param("topology.kubernetes.io/zone")
    region: str = param("topology.kubernetes.io/region")


class TopologyExtractor(PluginBase):
    plugin_type = EXTRACTOR_TYPE

    def __init__(self, name: str, params: ExtractorParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or ExtractorParams()
        defaults = ExtractorParams()
        self._keys = (
            params.hostname or defaults.hostname,  # llm-d: an empty label key means the default
            params.rack or defaults.rack,
            params.zone or defaults.zone,
            params.region or defaults.region,
        )

    def topology(self, endpoint: EndpointView) -> Topology | None:
        labels = endpoint.labels
        values = [labels.get(key, "") for key in self._keys]
        return Topology(*values) if any(values) else None


def _build_extractor(name: str, params: ExtractorParams, handle: Handle) -> TopologyExtractor:
    _log.info(
        '%s "%s": topology from endpoint labels only (the pod spec.hostname fallback of llm-d needs pod '
        "notifications, which this data layer does not provide)",
        EXTRACTOR_TYPE,
        name,
    )
    return TopologyExtractor(name, params)


def _extractor(handle: Handle, plugin_type: str, name: str, producer: str) -> TopologyExtractor | None:
    try:
        plugin: Plugin = handle.plugin(producer or EXTRACTOR_TYPE)
    except KeyError:
        _log.warning(
            '%s "%s": no %s named "%s" in the configuration: inert (no endpoint has a topology)',
            plugin_type,
            name,
            EXTRACTOR_TYPE,
            producer or EXTRACTOR_TYPE,
        )
        return None
    if not isinstance(plugin, TopologyExtractor):
        raise ConfigError(
            f"plugin {plugin.name!r} ({plugin.plugin_type}) is not a {EXTRACTOR_TYPE}",
            location=f"{plugin_location(plugin_type, name)}: parameters.topologyProducerName",
        )
    return plugin


class _Affinity(PluginBase):
    def __init__(self, name: str, extractor: TopologyExtractor | None) -> None:
        super().__init__(name)
        self.extractor = extractor

    def _levels(self, cycle: CycleState, endpoints: Sequence[EndpointView]) -> list[int] | None:
        """Each candidate's proximity to the peer; None without a peer topology."""
        extractor = self.extractor
        peer = cycle.read(PEER_ENDPOINT)
        if extractor is None or peer is None:
            return None
        peer_topology = extractor.topology(peer)
        if peer_topology is None:
            return None
        return [compare(peer_topology, extractor.topology(e)) for e in endpoints]


@dataclass(frozen=True, slots=True)
class FilterParams:
    min_affinity: str = param("host", choices=tuple(LEVELS))
    topology_producer_name: str = ""


class TopologyAffinityFilter(_Affinity):
    plugin_type = "topology-affinity-filter"

    def __init__(
        self, name: str, extractor: TopologyExtractor | None, params: FilterParams | None = None
    ) -> None:
        super().__init__(name, extractor)
        self.params = params = params or FilterParams()
        self._floor_name = params.min_affinity
        self._floor = LEVELS[params.min_affinity]

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        levels = self._levels(cycle, endpoints)
        if levels is None:
            return endpoints
        kept = [e for e, level in zip(endpoints, levels, strict=True) if level <= self._floor]
        return kept or endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return f"not co-located with the peer endpoint at {self._floor_name} level or tighter"


@dataclass(frozen=True, slots=True)
class ScorerParams:
    topology_producer_name: str = ""


class TopologyAffinityScorer(_Affinity):
    plugin_type = "topology-affinity-scorer"

    def __init__(
        self, name: str, extractor: TopologyExtractor | None, params: ScorerParams | None = None
    ) -> None:
        super().__init__(name, extractor)
        self.params = params or ScorerParams()

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        levels = self._levels(cycle, endpoints)
        if levels is None:
            return [0.0] * len(endpoints)
        return [SCORES[level] for level in levels]


def _build_filter(name: str, params: FilterParams, handle: Handle) -> TopologyAffinityFilter:
    extractor = _extractor(handle, TopologyAffinityFilter.plugin_type, name, params.topology_producer_name)
    return TopologyAffinityFilter(name, extractor, params)


def _build_scorer(name: str, params: ScorerParams, handle: Handle) -> TopologyAffinityScorer:
    extractor = _extractor(handle, TopologyAffinityScorer.plugin_type, name, params.topology_producer_name)
    return TopologyAffinityScorer(name, extractor, params)


extractor_factory = factory_with_params(EXTRACTOR_TYPE, ExtractorParams, _build_extractor)
filter_factory = factory_with_params(TopologyAffinityFilter.plugin_type, FilterParams, _build_filter)
scorer_factory = factory_with_params(TopologyAffinityScorer.plugin_type, ScorerParams, _build_scorer)
