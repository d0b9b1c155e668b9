"""``active-request-scorer`` (llm-d): fewer requests in flight from this picker is better.

Input: the picker's own in-flight count per endpoint, kept by an :class:`InflightTracker` from the
lifecycle hooks of :class:`~scheduler.plugins.shared.inflight_hooks.InflightHooks` (not from
scraped metrics, so it reacts within the same millisecond):

* ``on_dispatched`` counts the request against the first target of every routed profile (the
  decode and the prefill endpoint in P/D), once per request id;
* ``on_response_headers`` moves the count to the endpoint that actually served when the proxy
  reports a fallback served (header ``x-gateway-destination-endpoint-served``);
* ``on_completed`` uncounts it, idempotently (a completion reported twice counts once);
* entries older than ``requestTimeout`` are dropped (a completion that never came).

Formula, with ``hi`` the largest count among the candidates::

    count <= idleThreshold  -> 1.0                                  # idle
    otherwise               -> (hi - count) / hi * maxBusyScore

i.e. min-max normalisation anchored at zero: the busiest candidate scores 0, idle ones 1; a
``maxBusyScore`` below 1 opens a gap between idle and merely less busy endpoints (llm-d).

Parameters: ``requestTimeout`` (duration, default ``"2m"``, > 0), ``idleThreshold`` (int >= 0,
default 0), ``maxBusyScore`` (0 <= x <= 1, default 1.0), ``inFlightLoadProducerName`` (llm-d-router:
read that ``inflight-load-producer``'s request counts instead of counting here; see
:mod:`scheduler.plugins.shared.inflight_consumer`).

Replica sync (:mod:`scheduler.replica_sync`; the picker's ``--replica-sync-port``): active-active
replicas send each other their own in-flight counts periodically, and the counts scored are this
replica's plus every live peer's latest ones (a peer's expire when it goes silent), so replicas do not
all send to the endpoint that looks idle to each of them alone. It records no ownership.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.interfaces import Handle
from scheduler.params import param, parse_params
from scheduler.plugins.base import PluginBase
from scheduler.plugins.shared.inflight import InflightTracker
from scheduler.plugins.shared.inflight_consumer import InflightLoadConsumer, check_own_tracking
from scheduler.plugins.shared.inflight_hooks import SERVED_ENDPOINT_HEADER, InflightHooks
from scheduler.replica_sync import OwnershipClaim, PeerLoads, ReplicaSyncSink
from scheduler.types import EndpointView, LLMRequest

__all__ = ["SERVED_ENDPOINT_HEADER", "ActiveRequestParams", "ActiveRequestScorer", "factory"]


@dataclass(frozen=True, slots=True)
class ActiveRequestParams:
    request_timeout: float = param(120.0, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0")
    idle_threshold: int = param(0, ge=0)
    max_busy_score: float = param(1.0, ge=0, le=1)
    in_flight_load_producer_name: str = param("")


class ActiveRequestScorer(InflightLoadConsumer, InflightHooks, PluginBase):
    plugin_type = "active-request-scorer"
    count_every_profile = True

    def __init__(
        self, name: str, clock: Callable[[], float], params: ActiveRequestParams | None = None
    ) -> None:
        super().__init__(name)
        self.params = params = params or ActiveRequestParams()
        self.tracker = InflightTracker(clock, params.request_timeout)
        self.inflight_producer_name = params.in_flight_load_producer_name
        self._idle = params.idle_threshold
        self._busy_max = params.max_busy_score
        self.peer_loads = PeerLoads(clock)

    # -- replica sync (scheduler.replica_sync.ReplicaSynced): in-flight counts only ------------------

    def attach_replica_sync(self, sink: ReplicaSyncSink) -> None:
        """Nothing to send as it happens: this plugin records no ownership."""

    def replica_loads(self) -> dict[str, int]:
        return dict(self.tracker.request_counts)

    def apply_remote_ownership(self, claim: OwnershipClaim) -> None:
        """Ignored: this plugin records no ownership."""

    def apply_remote_loads(self, peer: int, counts: Mapping[str, int], ttl: float) -> None:
        self.peer_loads.apply(peer, counts, ttl)

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        super().on_endpoints_removed(addresses)
        self.peer_loads.forget(addresses)

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        producer = self.inflight_producer
        counts: Mapping[str, int]
        if producer is not None:
            counts = producer.request_counts
        else:
            counts = self.peer_loads.merged(self.tracker.request_counts)
        if not counts:
            return [1.0] * len(endpoints)
        values = list(map(counts.get, cycle.addresses(endpoints), repeat(0)))
        hi = max(values, default=0)
        idle = self._idle
        if hi <= idle:
            return [1.0] * len(values)
        scale = self._busy_max / hi
        return [1.0 if v <= idle else (hi - v) * scale for v in values]


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> ActiveRequestScorer:
    plugin = ActiveRequestScorer(
        name,
        handle.clock,
        parse_params(ActiveRequestParams, parameters, ActiveRequestScorer.plugin_type, name),
    )
    plugin.own_tracking = check_own_tracking(ActiveRequestScorer.plugin_type, name, parameters)
    return plugin
