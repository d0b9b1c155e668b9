"""``prefix-affinity-scorer`` (pyepp): send a prefix to the endpoint that owns it, with bounded load.

The approximate prefix index (``prefix-cache-scorer``) estimates what each server's KV cache holds and
forgets a prefix when the server probably evicted it; routing on it alone lets a group's next request
go wherever load says after every eviction, the group spreads over the fleet, each cache must hold more
distinct prefixes and eviction gets worse. This plugin keeps the other half of the picture: *who owns*
a prefix, an assignment that outlives the cache (:mod:`scheduler.plugins.prefix.owners`, bounded by
bytes, not by the servers' KV size).

Placement (consistent hashing with bounded loads, with owners instead of hash positions). For the
candidates ``E`` (after filters), ``load(e)`` = requests this picker has in flight to ``e``
(dispatched, not completed), ``m = Σ load(e)`` and ``n = |E|``::

    bound          = min(max(minLoadBound, ceil(loadFactor · (m + 1) / n)), min_e load(e) + maxImbalance)
    eligible(e)    ⇔  load(e) + 1 <= bound
    (d, owners)    = the deepest anchor of the prompt that has owners (depth d of t blocks)
    chosen         = the first eligible owner, in assignment order (primary first, then spills)
    score(chosen)  = d / t;   score(e) = 0 for every other endpoint

* a new prefix (no owner) with ``newPrefixPlacement: load`` (the default) scores 0 everywhere: the
  profile's load scorers place it, and the endpoint dispatched to becomes its primary owner;
* an owner keeps its prefixes while it is under the bound; when it is over, the prefix *spills* to the
  next owner, and if every owner is over, the endpoint it is dispatched to becomes the next spill owner
  (at most ``maxOwners``; beyond, the newest spill owner is replaced), so a hot prefix grows onto a
  second server instead of scattering over all of them. Where that endpoint may be is
  ``spillPlacement``: ``balanced`` (the default) scores ``d / t`` on the eligible *light* endpoints
  (below) and the load scorers choose among them; ``load`` scores 0 everywhere and leaves it to them;
* ``newPrefixPlacement: balanced`` (opt-in) applies the same rule to new prefixes. Light endpoints hold
  no more than their share of the *footprint* of placed prefixes, what each endpoint's KV cache must
  hold, as vllm-router's ``cache_aware`` balances with its smallest-tree rule, while the load scorers
  still choose among the endpoints it allows::

      F(e)           = Σ blocks of the prompts whose new prefix was placed on e, over the placements
                       used (placed, or a later request of the prefix dispatched) within placementWindow
      light(e)       ⇔  F(e) <= prefixLoadFactor · Σ_candidates F / n     (at or below the mean)
      score(e)       = 1 for a new prefix, d / t for a spill, on every eligible light e; 0 elsewhere

  With a working set larger than the fleet's KV cache, placing new prefixes by load alone lets a few
  servers collect more groups than they can hold (they thrash) while others hold spare room; balancing
  the footprint keeps each cache's share of the working set even. At least the lightest candidate is
  light; when no light endpoint is under the bound, every score is 0 and the load scorers decide.
  Not the default for new prefixes: where unique prompts are half the traffic it sends them to light
  endpoints whatever their load, owners then exceed the bound and groups spill (docs/bench.md,
  "Footprint-balanced placement"). For spills it is: a spilled prefix is known to be shared, and
  sending it where the footprint is lightest duplicates it where there is most room;
* ``newPrefixPlacement: hash`` places new prefixes and spills by rendezvous hashing instead of load
  (:mod:`scheduler.plugins.prefix.rendezvous`), so picker replicas that do not share in-flight views
  (active-active) choose the same owner::

      key            = h_1 (the hash of the prompt's first block)
      weight(key, e) = mix64(key XOR blake2b64(address(e)))      (stable across processes)
      share          = ceil(prefixLoadFactor · (P + 1) / n)     (new prefixes only)
      placed         = argmax weight(key, e) over eligible e holding < share placed prefixes
                       (over every eligible e if none does; for a spill, over every eligible e)
      score(placed)  = 1 for a new prefix, d / t for a spill; 0 for every other endpoint

  ``P`` is the number of first blocks this picker placed and still remembers (LRU, 1/8 of
  ``maxIndexBytes``), an endpoint's *held* prefixes those placed on it: consistent hashing with bounded
  loads, where the load is prefixes, so a few dozen groups do not land unevenly on a few servers (their
  KV caches then thrash). Replicas that saw different new prefixes may count shares differently, so they
  agree exactly while no top-ranked endpoint is at its share (``prefixLoadFactor`` >= 1, default 1.0,
  an even split, which measured best on one replica; higher balances less and, in principle, agrees
  more, which the working-set runs did not resolve from noise).

  A prefix goes to its top-ranked endpoint while that one is under the bound and to the next-ranked
  eligible one when it is not, so replicas whose loads are similar agree on spills too. Keying on
  ``h_1`` puts every prompt of a group on the same ranking (a group's prompts share their first block
  if they share anything, and a replica that saw fewer of them knows the same ``h_1``). Limit: once a
  first block has an owner the prompt is no longer new, so behind a preamble common to *all* prompts
  (longer than a block) the owners of the preamble decide, as with ``load``;
* the score never goes to an endpoint above the bound, and with ``loadFactor`` c no endpoint receives
  affinity traffic above c times the mean load (CH-BL's guarantee) nor more than ``maxImbalance``
  requests above the least loaded candidate, ``minLoadBound`` keeping low-load bursts of one group
  together;
* an owner over the bound keeps the prefix through a *burst of other prefixes* (``spillShare``, ours):
  with ``mine(o)`` the requests of this prefix (keyed by its first block) in flight at owner ``o``::

      hard           = min(bound, min_e load(e) + maxBurstImbalance)
      keeps(o)       ⇔  load(o) + 1 <= hard  and  mine(o) < spillShare · load(o)

  when no owner is eligible, the first owner that ``keeps`` the prefix is chosen as if it were. A
  prefix that makes at least ``spillShare`` of its owner's load is *hot*: the owner is busy with it,
  and a second server must take some (it spills, as above); an owner busy with *other* prefixes for a
  moment is waited out, because a spill copies the prompt into a second cache and, where the working
  set outgrows the fleet's KV, evicts another group there. Measured over five workload seeds
  (docs/bench.md, "Waiting out bursts"): working-set hit rate +1.1 points and saturated +4.8 against
  ``spillShare: 0`` (spill on the bound alone, as before 2026-11-26), TTFT p90 higher but below
  ``cache_aware``'s; few-prefixes unchanged (its three groups are hot by this rule). ``0`` turns the
  rule off. Limit: behind a preamble common to every prompt (longer than a block) all prompts share
  the key, every prefix looks hot, and spills follow the bound alone, as with ``0``;
* a *slow* endpoint is held to its capacity share (``slowSpeedRatio``, ours): an endpoint whose
  decode speed, learnt from the picker's streamed responses, is at most ``slowSpeedRatio`` of the
  fastest's, and whose decayed share of dispatches is at least its capacity share, takes no new prefix
  and no spill and sheds just enough of its prefixes (they spill as above). The formulas are in
  :mod:`scheduler.plugins.prefix.speed`; measured: docs/bench.md, "Slower servers";
* ``d / t`` makes a long shared prefix decisive and a short shared preamble (a common first block)
  nearly neutral.

Hashes: the cycle's prefix match (``prefix-cache-scorer``, same block size and chain) when one is
configured, else computed here with ``blockSizeTokens`` x 4 characters per block. Lifecycle:
``on_dispatched`` records the primary endpoint as owner of every anchor and counts the request in
flight (and in the dispatch shares); ``on_completed`` uncounts it (and samples the serving endpoint's
decode time per token from a streamed response); ``on_response_headers`` follows a fallback that served;
``on_endpoints_removed`` forgets the endpoint's ownerships and counts.

Parameters: ``loadFactor`` (c >= 1, default 2.0), ``minLoadBound`` (requests >= 1, default 16),
``maxImbalance`` (requests >= 1, default 8), ``maxOwners`` (>= 1, default 2),
``newPrefixPlacement`` (``load`` | ``balanced`` | ``hash``, default ``load``), ``spillPlacement``
(``balanced`` | ``load``, default ``balanced``; not with ``hash``, whose spills follow the ranking),
``prefixLoadFactor`` (>= 1, default 1.0; the light bound, and ``hash``'s share), ``spillShare``
(0..1, default 0.75; 0 = off), ``maxBurstImbalance`` (requests >= 1, default 16), ``slowSpeedRatio``
(0 <= r < 1, default 0.65; 0 = off), ``speedSamples`` (4..4096, default 32; an endpoint needs a quarter
of them to be judged), ``shareHalfLife`` (duration, default ``"5s"``: the dispatch shares' half-life),
``placementWindow``
(duration, default ``"10m"``: a placement unused this long stops counting toward its endpoint's
footprint or share), ``maxIndexBytes`` (ownership memory, >= 64 KiB, default 32 MiB = ~200,000 anchors;
when placements are remembered, i.e. unless both placements are ``load``, an eighth of it holds them,
at most ``PLACEMENT_BYTES`` each), ``blockSizeTokens`` (>= 1, default 16; only
without a prefix-cache-scorer),
``maxPrefixBlocksToMatch`` (>= 1, default 256; idem), ``requestTimeout`` (duration, default
``"2m"``: an in-flight count whose completion never came is dropped).

Replica sync (:mod:`scheduler.replica_sync`; the picker's ``--replica-sync-port``): active-active
replicas send each other every new ownership (a new prefix's primary owner, a new spill owner, with the
placement recorded for it) and, periodically, their in-flight counts. A peer's ownership is recorded
with the conflict rule of :mod:`scheduler.plugins.prefix.owners` (the higher rendezvous weight keeps a
raced new prefix; a placement raced the same way goes to the same endpoint), and ``load(e)`` above is
this replica's count plus every live peer's latest one, so N replicas bound and place as one would.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.prefix.hashing import ChainHasher
from scheduler.plugins.prefix.match import prefix_match
from scheduler.plugins.prefix.owners import ENTRY_BYTES, OwnerTable, outranks
from scheduler.plugins.prefix.rendezvous import PLACEMENT_BYTES, Placements, weight
from scheduler.plugins.prefix.speed import SlowEndpoints
from scheduler.plugins.shared.inflight import InflightTracker, dispatch_targets
from scheduler.plugins.shared.inflight_hooks import InflightHooks
from scheduler.replica_sync import OwnershipClaim, PeerLoads, ReplicaSyncSink
from scheduler.types import Completion, EndpointView, LLMRequest, SchedulingResult

__all__ = [
    "PLACEMENTS",
    "SPILL_PLACEMENTS",
    "PrefixAffinityParams",
    "PrefixAffinityScorer",
    "factory",
    "load_bound",
]

PLACEMENTS = ("load", "balanced", "hash")  # newPrefixPlacement: who places a prefix with no owner
SPILL_PLACEMENTS = ("balanced", "load")  # spillPlacement: where a prefix goes when every owner is over

_PENDING_LIMIT = 1024  # hash chains kept from score to on_dispatched (bounded)
_NONE: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class PrefixAffinityParams:
    load_factor: float = param(2.0, ge=1.0, le=100.0)
    min_load_bound: int = param(16, ge=1)
    max_imbalance: int = param(8, ge=1)
    max_owners: int = param(2, ge=1, le=64)
    new_prefix_placement: str = param("load", choices=PLACEMENTS)
    spill_placement: str = param("balanced", choices=SPILL_PLACEMENTS)
    prefix_load_factor: float = param(1.0, ge=1.0, le=100.0)
    max_index_bytes: int = param(32 * 1024 * 1024, ge=64 * 1024)
    block_size_tokens: int = param(16, ge=1, le=65536)
    max_prefix_blocks_to_match: int = param(256, ge=1, le=65536)
    request_timeout: float = param(120.0, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0")
    placement_window: float = param(600.0, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0")
    spill_share: float = param(0.75, ge=0.0, le=1.0)
    max_burst_imbalance: int = param(16, ge=1)
    slow_speed_ratio: float = param(0.65, ge=0.0, lt=1.0)
    speed_samples: int = param(32, ge=4, le=4096)
    share_half_life: float = param(5.0, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0")

    @property
    def remembers_placements(self) -> bool:
        """``balanced`` or ``hash`` placement, or ``balanced`` spills, keep each endpoint's footprint
        of placed prefixes."""
        return self.new_prefix_placement != "load" or self.spill_placement == "balanced"

    @property
    def max_entries(self) -> int:
        """Ownership entries: the whole budget, or 7/8 of it when placements are remembered."""
        if self.remembers_placements:
            return max(1, (self.max_index_bytes - self.max_index_bytes // 8) // ENTRY_BYTES)
        return max(1, self.max_index_bytes // ENTRY_BYTES)

    @property
    def max_placements(self) -> int:
        """First-block placements remembered with ``balanced`` or ``hash`` placement: 1/8 of the budget."""
        return max(1, self.max_index_bytes // 8 // PLACEMENT_BYTES)


def load_bound(total_inflight: int, endpoints: int, load_factor: float, min_bound: int) -> int:
    """The most requests an owner may have in flight, this one included (see the module docstring)."""
    return max(min_bound, math.ceil(load_factor * (total_inflight + 1) / max(1, endpoints)))


class PrefixAffinityScorer(InflightHooks, PluginBase):
    plugin_type = "prefix-affinity-scorer"
    count_every_profile = False
    params: PrefixAffinityParams

    def __init__(
        self, name: str, clock: Callable[[], float], params: PrefixAffinityParams | None = None
    ) -> None:
        super().__init__(name)
        self.params = params = params or PrefixAffinityParams()
        self.tracker = InflightTracker(clock, params.request_timeout)
        self.owners = OwnerTable(params.max_entries, params.max_owners)
        self.placements = Placements(params.max_placements, params.placement_window)
        self._clock = clock
        self._pending: dict[str, tuple[tuple[int, ...], bool]] = {}  # request id -> (hashes, new)
        self._hasher = ChainHasher()
        self._sync: ReplicaSyncSink | None = None
        self.peer_loads = PeerLoads(clock)
        self.slow = SlowEndpoints(params.slow_speed_ratio, params.speed_samples, params.share_half_life)

    # -- replica sync (scheduler.replica_sync.ReplicaSynced) ----------------------------------------

    def attach_replica_sync(self, sink: ReplicaSyncSink) -> None:
        self._sync = sink

    def replica_loads(self) -> dict[str, int]:
        return dict(self.tracker.request_counts)

    def apply_remote_ownership(self, claim: OwnershipClaim) -> None:
        now = self._clock()
        self.owners.apply_remote(claim.key, claim.anchors, claim.address, now)
        if claim.placement > 0 and self.params.remembers_placements:
            placed = self.placements.get(claim.key)
            if placed == claim.address:
                self.placements.touch(claim.key, now)
            elif placed is None or outranks(claim.key, claim.address, placed):
                self.placements.record(claim.key, claim.address, claim.placement, now)

    def apply_remote_loads(self, peer: int, counts: Mapping[str, int], ttl: float) -> None:
        self.peer_loads.apply(peer, counts, ttl)

    def dump_state(self) -> dict[str, Any]:
        """``/debug/plugins/state``: table sizes, the live peers' in-flight counts, and a digest of the
        ownership table's contents (equal on replicas that agree on every owner; O(entries))."""
        digest = hashlib.blake2b(digest_size=16)
        for h, owners in sorted(self.owners.items()):
            digest.update(f"{h}={','.join(owners)};".encode())
        self.load_counts()  # expires silent peers
        return {
            "ownership_entries": len(self.owners),
            "owners_digest": digest.hexdigest(),
            "placements": len(self.placements),
            "peers": len(self.peer_loads),
            "peer_in_flight": dict(sorted(self.peer_loads.remote.items())),
            "in_flight": dict(sorted(self.tracker.request_counts.items())),
            **self.slow.dump(),
        }

    def load_counts(self) -> Mapping[str, int]:
        """Requests in flight per endpoint: this replica's, plus every live peer's latest counts."""
        return self.peer_loads.merged(self.tracker.request_counts)

    # -- per cycle ----------------------------------------------------------------------------------

    def hashes(self, cycle: CycleState | None, request: LLMRequest) -> tuple[int, ...]:
        found = prefix_match(cycle) if cycle is not None else None
        if found is not None:
            return found.hashes
        p = self.params
        return self._hasher.hashes(
            request.prompt_text,
            request.target_model,
            request.cache_salt,
            p.block_size_tokens * 4,
            p.max_prefix_blocks_to_match,
        )

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        hashes = self.hashes(cycle, request)
        out = [0.0] * len(endpoints)
        depth, owners = self.owners.lookup(hashes) if hashes else (0, ())
        if len(self._pending) >= _PENDING_LIMIT:
            self._pending.pop(next(iter(self._pending)))
        self._pending[request.request_id] = (hashes, not owners)
        if not hashes:
            return out
        counts = self.load_counts()
        capped = self.capped(endpoints) if self.slow.speeds.slow else _NONE
        if owners:
            chosen = self.choose(owners, endpoints, hashes[0], counts, cycle.addresses(endpoints), capped)
            if chosen is not None:
                out[chosen] = depth / len(hashes)
                return out
        p = self.params
        if p.new_prefix_placement == "hash":
            placed = self.place(hashes[0], endpoints, new=not owners, counts=counts, capped=capped)
            if placed is not None:
                out[placed] = depth / len(hashes) if owners else 1.0
        elif (p.spill_placement if owners else p.new_prefix_placement) == "balanced":
            for i in self.balanced(endpoints, counts, capped):
                out[i] = depth / len(hashes) if owners else 1.0
        elif capped:  # a new prefix placed by load: not on a slow endpoint at its capacity share
            ceiling = self.ceiling(endpoints, None, counts)
            for i, e in enumerate(endpoints):
                if e.address not in capped and counts.get(e.address, 0) + 1 <= ceiling:
                    out[i] = 1.0
        return out

    def capped(self, endpoints: Sequence[EndpointView]) -> frozenset[str]:
        """The slow endpoints whose share of recent dispatches is at least their capacity share among
        ``endpoints`` (module docstring; :class:`~scheduler.plugins.prefix.speed.SlowEndpoints`)."""
        return self.slow.capped([e.address for e in endpoints])

    def ceiling(
        self,
        endpoints: Sequence[EndpointView],
        addresses: Sequence[str] | None = None,
        counts: Mapping[str, int] | None = None,
    ) -> int:
        """The most requests an eligible endpoint may have in flight, this one included (``min(bound,
        least + maxImbalance)`` of the module docstring). ``addresses``: the endpoints' addresses, if
        the caller has them; ``counts``: :meth:`load_counts`, if the caller has them."""
        if counts is None:
            counts = self.load_counts()
        if addresses is None:
            addresses = [e.address for e in endpoints]
        bound, least = self._bound_and_least(addresses, counts)
        return min(bound, least + self.params.max_imbalance)

    def _bound_and_least(self, addresses: Sequence[str], counts: Mapping[str, int]) -> tuple[int, int]:
        """The ``loadFactor`` bound over ``addresses`` and their least in-flight count."""
        p = self.params
        if counts:
            loads = list(map(counts.get, addresses, repeat(0)))
            total, least = sum(loads), min(loads)
        else:
            total = least = 0
        return load_bound(total, len(addresses), p.load_factor, p.min_load_bound), least

    def choose(
        self,
        owners: Sequence[str],
        endpoints: Sequence[EndpointView],
        key: int = 0,
        counts: Mapping[str, int] | None = None,
        addresses: Sequence[str] | None = None,
        capped: frozenset[str] = _NONE,
    ) -> int | None:
        """Index in ``endpoints`` of the first eligible owner (module docstring), or None.
        ``addresses``: the endpoints' addresses, if the caller has them. Owners in ``capped`` (slow
        endpoints at their capacity share) are not eligible for the prefixes they divert."""
        if counts is None:
            counts = self.load_counts()
        if addresses is None:
            addresses = [e.address for e in endpoints]  # distinct: a snapshot holds an address once
        bound, least = self._bound_and_least(addresses, counts)  # one computation for both rules
        ceiling = min(bound, least + self.params.max_imbalance)  # as ``ceiling``
        if capped:
            owners = [o for o in owners if o not in capped or not self.slow.diverts(o, key)]
        for owner in owners:
            if owner in addresses and counts.get(owner, 0) + 1 <= ceiling:
                return addresses.index(owner)
        share = self.params.spill_share
        if share <= 0.0 or not owners:
            return None
        hard = min(bound, least + self.params.max_burst_imbalance)
        mine = self.tracker.key_counts
        own = self.tracker.request_counts  # the prefix's share is estimated on this replica's requests
        for owner in owners:
            if owner in addresses:
                load = counts.get(owner, 0)
                if load + 1 <= hard and mine.get((key, owner), 0) < share * own.get(owner, 0):
                    return addresses.index(owner)
        return None

    def balanced(
        self,
        endpoints: Sequence[EndpointView],
        counts: Mapping[str, int] | None = None,
        capped: frozenset[str] = _NONE,
    ) -> list[int]:
        """Indexes in ``endpoints`` where a new prefix may go with ``newPrefixPlacement: balanced``:
        under the load bound and holding at most ``prefixLoadFactor`` times the candidates' mean
        footprint of placed prefixes (module docstring). Empty when none is under the load bound."""
        placements = self.placements
        placements.expire(self._clock())
        if counts is None:
            counts = self.load_counts()
        ceiling = self.ceiling(endpoints, None, counts)
        held = placements.counts
        footprints = [held.get(e.address, 0) for e in endpoints]
        limit = self.params.prefix_load_factor * sum(footprints) / len(endpoints)
        return [
            i
            for i, e in enumerate(endpoints)
            if footprints[i] <= limit and counts.get(e.address, 0) + 1 <= ceiling and e.address not in capped
        ]

    def place(
        self,
        key: int,
        endpoints: Sequence[EndpointView],
        new: bool,
        counts: Mapping[str, int] | None = None,
        capped: frozenset[str] = _NONE,
    ) -> int | None:
        """Index in ``endpoints`` of the eligible endpoint of highest rendezvous weight for ``key``
        (``newPrefixPlacement: hash``), or None when none is under the bound. A ``new`` prefix also
        skips endpoints already holding their share of placed prefixes (module docstring)."""
        if counts is None:
            counts = self.load_counts()
        ceiling = self.ceiling(endpoints, None, counts)
        if new:
            self.placements.expire(self._clock())
        held = self.placements.counts if new else {}
        if held:
            share = math.ceil(self.params.prefix_load_factor * (self.placements.total + 1) / len(endpoints))
            before = self.placements.get(key)
        best, best_weight, spare, spare_weight = None, -1, None, -1
        for i, e in enumerate(endpoints):
            if counts.get(e.address, 0) + 1 <= ceiling and e.address not in capped:
                w = weight(key, e.address)
                if held and held.get(e.address, 0) >= share and e.address != before:
                    if w > spare_weight:
                        spare, spare_weight = i, w
                elif w > best_weight:
                    best, best_weight = i, w
        return best if best is not None else spare

    # -- lifecycle ----------------------------------------------------------------------------------

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        pending = self._pending.pop(request.request_id, None)
        if pending is None:
            hashes = self.hashes(None, request)
            new = not self.owners.lookup(hashes)[1] if hashes else False
        else:
            hashes, new = pending
        # the in-flight count, keyed by the prefix (its first block) for the burst rule of ``choose``
        key = hashes[0] if hashes and self.params.spill_share > 0.0 else None
        targets = dispatch_targets(result, every_profile=self.count_every_profile)
        self.tracker.dispatch(request.request_id, targets, key=key)
        if result.endpoints:
            self.slow.dispatched(result.endpoints[0].address, self._clock(), hashes[0] if hashes else None)
        if hashes and result.endpoints:
            address = result.endpoints[0].address
            changes: list[tuple[int, bool]] | None = None
            if self._sync is not None:
                changes = []
                self.owners.record(hashes, address, changes, self._clock())
            else:
                self.owners.record(hashes, address)
            placed = 0
            if self.params.remembers_placements:
                now = self._clock()
                if new:
                    placed = 1 if self.params.new_prefix_placement == "hash" else len(hashes)
                    self.placements.record(hashes[0], address, placed, now)
                else:
                    self.placements.touch(hashes[0], now)
            if self._sync is not None and (changes or placed):
                self._sync.ownership(
                    self.name, OwnershipClaim(address, hashes[0], tuple(changes or ()), placed)
                )

    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        super().on_completed(request, result, completion)
        primary = result.endpoints[0].address if result.endpoints else ""
        self.slow.completed(completion.served_endpoint or primary, completion)

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        super().on_endpoints_removed(addresses)
        self.owners.remove(addresses)
        self.placements.remove(addresses)
        self.peer_loads.forget(addresses)
        self.slow.forget(addresses)


factory = factory_with_params(
    PrefixAffinityScorer.plugin_type,
    PrefixAffinityParams,
    lambda name, params, handle: PrefixAffinityScorer(name, handle.clock, params),
)
