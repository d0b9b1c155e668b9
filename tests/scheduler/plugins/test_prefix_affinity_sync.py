"""prefix-affinity-scorer's replica sync (scheduler.replica_sync): claims, the conflict rule, peer loads.

Two scorer instances stand for two picker replicas; a sink delivers one's claims to the other (at
once, or held back to make them race), as the UDP transport of ``epp.sync`` does.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plugin_builders import DONE, routed

from scheduler.cycle_state import CycleState
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix.affinity import PrefixAffinityScorer, factory
from scheduler.plugins.prefix.owners import OwnerTable, anchor_depths, outranks
from scheduler.plugins.prefix.rendezvous import weight
from scheduler.replica_sync import MAX_PEERS, OwnershipClaim, ReplicaSynced
from scheduler.types import Endpoint, LLMRequest

BLOCK = 64
EPS = [Endpoint(f"10.3.0.{i}:8000") for i in range(4)]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock | None = None, **parameters: Any) -> PrefixAffinityScorer:
    handle = PluginHandle(clock=clock) if clock is not None else PluginHandle()
    plugin = factory("affinity", parameters, handle)
    assert isinstance(plugin, PrefixAffinityScorer)
    return plugin


class Sink:
    """Collects claims; ``deliver`` applies them to ``peer`` (held back until then)."""

    def __init__(self) -> None:
        self.claims: list[tuple[str, OwnershipClaim]] = []

    def ownership(self, plugin: str, claim: OwnershipClaim) -> None:
        self.claims.append((plugin, claim))

    def deliver(self, peer: PrefixAffinityScorer) -> int:
        n = len(self.claims)
        for _plugin, claim in self.claims:
            peer.apply_remote_ownership(claim)
        self.claims.clear()
        return n


def prompt(group: int, unique: int = 0, blocks: int = 12) -> str:
    shared = "".join(f"g{group:05d}b{b:03d}".ljust(BLOCK, "x") for b in range(blocks))
    return shared + f"q{unique:06d}".ljust(2 * BLOCK, "y")


def req(text: str, rid: str) -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=text)


def send(scorer: PrefixAffinityScorer, text: str, rid: str, fallback: int) -> int:
    """Score, take the affinity choice (else ``fallback``, the load scorers' stand-in), dispatch."""
    request = req(text, rid)
    scores = scorer.score(CycleState(), request, EPS)
    best = max(range(len(EPS)), key=lambda i: scores[i]) if max(scores) > 0 else fallback
    scorer.on_dispatched(request, routed(EPS[best]))
    return best


def test_the_scorer_is_replica_synced_and_sends_only_new_ownerships() -> None:
    a = make()
    assert isinstance(a, ReplicaSynced)
    sink = Sink()
    a.attach_replica_sync(sink)
    send(a, prompt(1), "r1", fallback=2)
    assert len(sink.claims) == 1
    plugin, claim = sink.claims[0]
    hashes = a.hashes(None, req(prompt(1), "x"))
    assert plugin == "affinity" and claim.address == EPS[2].address and claim.key == hashes[0]
    assert [h for h, _ in claim.anchors] == [hashes[d - 1] for d in anchor_depths(len(hashes))]
    assert all(created for _, created in claim.anchors)
    send(a, prompt(1), "r2", fallback=0)  # same prompt, same owner: nothing new
    assert len(sink.claims) == 1
    send(a, prompt(1, unique=7), "r3", fallback=0)  # a new question: only its last anchor is new
    assert len(sink.claims) == 2
    assert [created for _, created in sink.claims[1][1].anchors] == [True]


def test_a_peer_records_the_claims_and_never_echoes_them() -> None:
    a, b = make(), make()
    sa, sb = Sink(), Sink()
    a.attach_replica_sync(sa)
    b.attach_replica_sync(sb)
    send(a, prompt(5), "r1", fallback=3)
    assert sa.deliver(b) == 1
    assert sb.claims == []  # applying a claim sends nothing
    hashes = b.hashes(None, req(prompt(5), "x"))
    assert b.owners.lookup(hashes) == a.owners.lookup(hashes) == (len(hashes), (EPS[3].address,))
    # B now routes the group where A placed it, though it never dispatched it
    assert send(b, prompt(5, unique=1), "r2", fallback=0) == 3


def test_two_synced_replicas_agree_where_unsynced_ones_do_not() -> None:
    """Round-robin over two replicas, new prefixes placed by 'load' (a different fallback on each
    replica, as their partial views differ): synced, every group has one owner on both replicas."""

    def run(synced: bool) -> tuple[int, int]:
        a, b = make(), make()
        sa, sb = Sink(), Sink()
        if synced:
            a.attach_replica_sync(sa)
            b.attach_replica_sync(sb)
        groups_split = 0
        for g in range(20):
            where = set()
            for k in range(6):
                replica, fallback = (a, g % 4) if k % 2 == 0 else (b, (g + 1) % 4)
                where.add(send(replica, prompt(g, unique=k), f"g{g}-{k}", fallback))
                sa.deliver(b)
                sb.deliver(a)
            groups_split += len(where) > 1
        disagree = 0
        for g in range(20):
            hashes = a.hashes(None, req(prompt(g), "x"))
            disagree += a.owners.lookup(hashes)[1] != b.owners.lookup(hashes)[1]
        return groups_split, disagree

    assert run(synced=True) == (0, 0)
    split, disagree = run(synced=False)
    assert split == 20 and disagree == 20


@settings(max_examples=60, deadline=None)
@given(
    key=st.integers(0, 2**64 - 1),
    first=st.integers(0, 3),
    second=st.integers(0, 3),
    max_owners=st.integers(1, 3),
    a_first=st.booleans(),
)
def test_raced_new_prefixes_converge_whatever_the_order(
    key: int, first: int, second: int, max_owners: int, a_first: bool
) -> None:
    """Both replicas placed the same new prefix at once (each on its own endpoint); after the claims
    cross, in either order, both hold the same owners, the higher rendezvous weight first."""
    anchors = [key, key ^ 1, key ^ 2]
    a, b = OwnerTable(100, max_owners), OwnerTable(100, max_owners)
    ea, eb = EPS[first].address, EPS[second].address
    ca: list[tuple[int, bool]] = []
    cb: list[tuple[int, bool]] = []
    a.record(anchors, ea, ca)
    b.record(anchors, eb, cb)
    if a_first:
        b.apply_remote(key, ca, ea)
        a.apply_remote(key, cb, eb)
    else:
        a.apply_remote(key, cb, eb)
        b.apply_remote(key, ca, ea)
    winner = ea if ea == eb or outranks(key, ea, eb) else eb
    for h in anchors[:2]:
        assert a.owners(h) == b.owners(h)
        assert a.owners(h)[0] == winner
        assert len(a.owners(h)) == min(max_owners, len({ea, eb}))


def test_the_conflict_rule_uses_the_rendezvous_weight_of_the_first_block() -> None:
    key = 12345
    x, y = EPS[0].address, EPS[1].address
    hi, lo = (x, y) if weight(key, x) > weight(key, y) else (y, x)
    table = OwnerTable(10, 2)
    table.record([key], lo)
    table.apply_remote(key, [(key, True)], hi)  # a raced primary that outranks: takes the primary
    assert table.owners(key) == (hi, lo)
    table = OwnerTable(10, 2)
    table.record([key], hi)
    table.apply_remote(key, [(key, True)], lo)  # one that does not: a spill owner
    assert table.owners(key) == (hi, lo)
    table.apply_remote(key, [(key, False)], EPS[2].address)  # a peer's spill: the overflow slot
    assert table.owners(key) == (hi, EPS[2].address)


def test_raced_placements_converge() -> None:
    """``newPrefixPlacement: hash`` remembers placements; two replicas racing on one key converge."""
    a, b = make(newPrefixPlacement="hash"), make(newPrefixPlacement="hash")
    key = 777
    x, y = EPS[0].address, EPS[1].address
    a.placements.record(key, x, 1, 100.0)
    b.placements.record(key, y, 1, 100.0)
    a.apply_remote_ownership(OwnershipClaim(y, key, ((key, True),), placement=1))
    b.apply_remote_ownership(OwnershipClaim(x, key, ((key, True),), placement=1))
    assert a.placements.get(key) == b.placements.get(key) == (x if outranks(key, x, y) else y)
    assert a.placements.total == b.placements.total == 1


def test_peer_loads_count_toward_the_bound_and_expire() -> None:
    clock = Clock()
    a = make(clock, minLoadBound=2, maxImbalance=100, loadFactor=1.0, spillPlacement="load")
    owner = EPS[1].address
    a.owners.record(a.hashes(None, req(prompt(9), "x")), owner)
    request = req(prompt(9, unique=1), "r1")
    assert a.score(CycleState(), request, EPS)[1] > 0  # nothing in flight: the owner is eligible
    a.apply_remote_loads(42, {owner: 5}, ttl=0.2)
    assert a.load_counts()[owner] == 5
    assert a.score(CycleState(), request, EPS) == [0.0] * 4  # the peer's 5 requests: over the bound
    assert a.replica_loads() == {}  # its own counts are what it sends
    clock.now += 0.3  # the peer went silent
    assert a.load_counts() == {}
    assert a.score(CycleState(), request, EPS)[1] > 0


def test_peer_loads_replace_sum_and_are_bounded() -> None:
    clock = Clock()
    a = make(clock)
    a.tracker.dispatch("own", [EPS[0].address])
    a.apply_remote_loads(1, {EPS[0].address: 2, EPS[1].address: 1}, ttl=1.0)
    a.apply_remote_loads(2, {EPS[0].address: 3}, ttl=1.0)
    assert a.load_counts() == {EPS[0].address: 6, EPS[1].address: 1}
    a.apply_remote_loads(1, {EPS[1].address: 4}, ttl=1.0)  # peer 1's counts now: replaced
    assert a.load_counts() == {EPS[0].address: 4, EPS[1].address: 4}
    a.on_endpoints_removed(frozenset({EPS[1].address}))
    assert a.load_counts() == {EPS[0].address: 4}
    for peer in range(10, 10 + 3 * MAX_PEERS):
        a.apply_remote_loads(peer, {EPS[2].address: 1}, ttl=1.0)
    assert len(a.peer_loads) == MAX_PEERS


@pytest.mark.parametrize("placement", ["load", "balanced", "hash"])
def test_synced_replicas_hold_the_same_owners_under_every_placement(placement: str) -> None:
    a, b = make(newPrefixPlacement=placement), make(newPrefixPlacement=placement)
    sa, sb = Sink(), Sink()
    a.attach_replica_sync(sa)
    b.attach_replica_sync(sb)
    rids = itertools.count()
    for g in range(12):
        for k in range(4):
            replica = a if k % 2 == 0 else b
            send(replica, prompt(g, unique=k), f"r{next(rids)}", fallback=(g + k) % 4)
            sa.deliver(b)
            sb.deliver(a)
    for g in range(12):
        hashes = a.hashes(None, req(prompt(g), "x"))
        assert a.owners.lookup(hashes) == b.owners.lookup(hashes)
    for r in range(next(rids)):
        for replica in (a, b):
            replica.on_completed(req("", f"r{r}"), routed(EPS[0]), DONE)


def test_the_state_digest_tells_agreeing_replicas() -> None:
    a, b, c = make(), make(), make()
    sa = Sink()
    a.attach_replica_sync(sa)
    for g in range(5):
        send(a, prompt(g), f"r{g}", fallback=g % 4)
        send(c, prompt(g), f"r{g}", fallback=(g + 1) % 4)
    sa.deliver(b)
    b.apply_remote_loads(3, {EPS[0].address: 2}, ttl=1.0)
    state_a, state_b, state_c = a.dump_state(), b.dump_state(), c.dump_state()
    assert state_a["owners_digest"] == state_b["owners_digest"] != state_c["owners_digest"]
    assert state_a["ownership_entries"] == state_b["ownership_entries"] > 0
    assert state_b["peers"] == 1 and state_b["peer_in_flight"] == {EPS[0].address: 2}
    assert len(state_a["in_flight"]) > 0 and state_b["in_flight"] == {}


def test_active_request_scorer_shares_its_counts_too() -> None:
    from scheduler.plugins.scorers.active_request import factory as active_factory

    clock = Clock()
    scorer = active_factory("active", {}, PluginHandle(clock=clock))
    assert isinstance(scorer, ReplicaSynced)
    scorer.on_dispatched(req("x", "r1"), routed(EPS[0]))
    assert scorer.replica_loads() == {EPS[0].address: 1}
    assert scorer.score(CycleState(), req("y", "r2"), EPS) == [0.0, 1.0, 1.0, 1.0]
    scorer.apply_remote_loads(7, {EPS[1].address: 3}, ttl=0.2)  # a peer keeps EPS[1] busier
    assert scorer.score(CycleState(), req("y", "r2"), EPS) == [2 / 3, 0.0, 1.0, 1.0]
    assert scorer.replica_loads() == {EPS[0].address: 1}  # what it sends: its own
    clock.now += 0.5  # the peer went silent
    assert scorer.score(CycleState(), req("y", "r2"), EPS) == [0.0, 1.0, 1.0, 1.0]
    scorer.apply_remote_loads(7, {EPS[1].address: 3}, ttl=0.2)
    scorer.on_endpoints_removed(frozenset({EPS[1].address}))
    assert scorer.peer_loads.merged({}) == {}


@pytest.mark.parametrize("a_first", [True, False])
def test_raced_spills_converge_and_a_later_spill_replaces(a_first: bool) -> None:
    """Both replicas spill the same prefix at once, to different endpoints: after the claims cross
    both keep the higher-weight spill owner; a spill long after replaces the newest one as locally."""
    key = 4242
    primary, x, y, z = (e.address for e in EPS)
    a, b = OwnerTable(10, 2), OwnerTable(10, 2)
    for table in (a, b):
        table.record([key], primary, None, 0.0)
    ca: list[tuple[int, bool]] = []
    cb: list[tuple[int, bool]] = []
    a.record([key], x, ca, 10.0)
    b.record([key], y, cb, 10.0)
    assert ca == cb == [(key, False)]
    if a_first:
        b.apply_remote(key, ca, x, 10.02)
        a.apply_remote(key, cb, y, 10.03)
    else:
        a.apply_remote(key, cb, y, 10.02)
        b.apply_remote(key, ca, x, 10.03)
    winner = x if outranks(key, x, y) else y
    assert a.owners(key) == b.owners(key) == (primary, winner)
    later: list[tuple[int, bool]] = []
    b.record([key], z, later, 30.0)  # z takes the overflow slot on b, 20 s later
    a.apply_remote(key, later, z, 30.01)
    assert a.owners(key) == b.owners(key) == (primary, z)
