"""prefix-affinity-scorer and its ownership table: anchors, owners, load bound, churn, memory budget."""

from __future__ import annotations

import itertools
import math
import random
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plugin_builders import DONE, FakeClock, endpoints, routed

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix.affinity import PrefixAffinityParams, PrefixAffinityScorer, factory, load_bound
from scheduler.plugins.prefix.owners import ENTRY_BYTES, OwnerTable, anchor_depths
from scheduler.plugins.prefix.scorer import factory as prefix_factory
from scheduler.types import Completion, Endpoint, LLMRequest, Outcome, Usage

EPS = endpoints(4)
BLOCK = 64  # characters per block at the default blockSizeTokens (16 x 4)


def make(**parameters: Any) -> PrefixAffinityScorer:
    plugin = factory("affinity", parameters, PluginHandle())
    assert isinstance(plugin, PrefixAffinityScorer)
    return plugin


def req(text: str, rid: str) -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=text)


def group_prompt(group: int, blocks: int = 40, unique: int = 0) -> str:
    """``blocks`` full blocks shared by the group, then ``unique``'s own question (2 blocks)."""
    shared = "".join(f"g{group:03d}b{b:03d}".ljust(BLOCK, "x") for b in range(blocks))
    return shared + f"q{unique:06d}".ljust(2 * BLOCK, "y")


class Fleet:
    """Drives the scorer like the scheduler: score, pick (affinity first, then least loaded), dispatch."""

    def __init__(self, scorer: PrefixAffinityScorer, eps: list[Endpoint] = EPS) -> None:
        self.scorer = scorer
        self.eps = eps
        self.n = 0

    def load(self, ep: Endpoint) -> int:
        return self.scorer.tracker.requests(ep.address)

    def send(self, text: str) -> tuple[str, LLMRequest, list[float]]:
        self.n += 1
        request = req(text, f"r{self.n}")
        scores = self.scorer.score(CycleState(), request, self.eps)
        best = max(range(len(self.eps)), key=lambda i: (scores[i], -self.load(self.eps[i]), -i))
        self.scorer.on_dispatched(request, routed(self.eps[best]))
        return self.eps[best].address, request, scores

    def complete(self, request: LLMRequest) -> None:
        self.scorer.on_completed(request, routed(self.eps[0]), DONE)


# -- anchors --------------------------------------------------------------------------------------


def test_anchor_depths_small_and_octaves() -> None:
    assert anchor_depths(0) == ()
    assert anchor_depths(3) == (1, 2, 3)
    assert anchor_depths(8) == tuple(range(1, 9))
    assert anchor_depths(33) == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 33)
    assert len(anchor_depths(256)) == 8 + 4 * 5  # the last block (256) is an anchor already


@given(st.integers(min_value=1, max_value=70000))
def test_anchor_depths_cover_every_prefix_within_a_quarter(n: int) -> None:
    depths = anchor_depths(n)
    assert list(depths) == sorted(set(depths)) and depths[0] == 1 and depths[-1] == n
    assert len(depths) <= 9 + 4 * max(0, math.ceil(math.log2(n / 8))) if n > 8 else len(depths) == n
    for shallow, deep in itertools.pairwise(depths):
        assert deep <= max(shallow + 1, shallow * 1.25) or deep == n


# -- the ownership table --------------------------------------------------------------------------


def test_primary_stays_and_the_overflow_slot_takes_new_spills() -> None:
    table = OwnerTable(max_entries=100, max_owners=2)
    hashes = list(range(1, 21))
    table.record(hashes, "a")
    table.record(hashes, "b")
    assert table.lookup(hashes) == (20, ("a", "b"))
    table.record(hashes, "c")  # beyond maxOwners: replaces the newest spill, never the primary
    assert table.lookup(hashes) == (20, ("a", "c"))
    assert table.lookup([*hashes[:12], 999, 998]) == (12, ("a", "c"))  # the deepest shared anchor
    assert table.lookup([501, 502, 503]) == (0, ())


def test_lru_bound_and_removal() -> None:
    table = OwnerTable(max_entries=50, max_owners=3)
    for p in range(100):
        table.record([p * 1000 + i for i in range(1, 9)], f"e{p % 3}")
        assert len(table) <= 50
    assert table.lookup([99000 + i for i in range(1, 9)]) == (8, ("e0",))  # most recent kept
    assert table.lookup([1000 + i for i in range(1, 9)]) == (0, ())  # oldest dropped
    table.remove({"e0"})
    assert table.lookup([99000 + i for i in range(1, 9)]) == (0, ())
    assert all(owners for owners in table._entries.values())


def test_memory_per_entry_within_the_documented_bound() -> None:
    entries = 20000
    rng = random.Random(1)
    addresses = [f"10.0.{i // 256}.{i % 256}:8000" for i in range(16)]
    table = OwnerTable(max_entries=entries, max_owners=2)
    prompts = [[rng.getrandbits(64) for _ in range(60)] for _ in range(entries // 20 + 200)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i, hashes in enumerate(prompts):
        table.record(hashes, addresses[i % 16])
        if i % 3 == 0:
            table.record(hashes, addresses[(i + 5) % 16])
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del prompts
    assert len(table) == entries
    assert used / entries <= ENTRY_BYTES, f"{used / entries:.0f} bytes per entry"


# -- the scorer -----------------------------------------------------------------------------------


def test_parameters_are_validated() -> None:
    with pytest.raises(ConfigError, match="loadFactor"):
        make(loadFactor=0.5)
    with pytest.raises(ConfigError, match="maxIndexBytes"):
        make(maxIndexBytes=10)
    budget = 32 * 2**20
    assert make(maxIndexBytes=budget, spillPlacement="load").owners.max_entries == budget // ENTRY_BYTES
    # balanced spills (the default) keep placements in an eighth of the budget
    assert make(maxIndexBytes=budget).owners.max_entries == (budget - budget // 8) // ENTRY_BYTES
    with pytest.raises(ConfigError, match="spillPlacement"):
        make(spillPlacement="anywhere")


def test_new_prefix_scores_zero_then_its_owner_scores_its_owned_fraction() -> None:
    fleet = Fleet(make())
    first, r1, scores = fleet.send(group_prompt(1, unique=1))
    assert scores == [0.0] * 4
    fleet.complete(r1)
    again, _, scores = fleet.send(group_prompt(1, unique=2))
    assert again == first
    owned = max(scores)
    assert scores.count(0.0) == 3 and 32 / 42 <= owned < 1.0  # 40 shared blocks of 42; anchor 40


def test_reads_the_prefix_cache_scorers_hashes_when_configured() -> None:
    prefix = prefix_factory("prefix", {}, PluginHandle())
    scorer = make()
    cycle = CycleState()
    request = req(group_prompt(2), "r1")
    prefix.prepare(cycle, request, EPS)  # type: ignore[attr-defined]
    assert scorer.hashes(cycle, request) == prefix.match(cycle, request).hashes  # type: ignore[attr-defined]


def test_affinity_outlives_the_cache_estimate() -> None:
    """Stable under churn: ownership is kept while the KV-sized estimate forgets every prefix."""
    prefix = prefix_factory("prefix", {"lruCapacityPerServer": 256, "autoTune": False}, PluginHandle())
    scorer = make()
    fleet = Fleet(scorer)
    owner: dict[int, str] = {}
    for round_ in range(6):
        done = []
        for g in range(40):  # 40 groups x 42 blocks: far more than the estimate's 256 per endpoint
            cycle = CycleState()
            request = req(group_prompt(g, unique=round_), f"g{g}r{round_}")
            prefix.prepare(cycle, request, EPS)  # type: ignore[attr-defined]
            scores = scorer.score(cycle, request, EPS)
            best = max(range(4), key=lambda i: (scores[i], -fleet.load(EPS[i]), -i))
            result = routed(EPS[best])
            prefix.on_dispatched(request, result)  # type: ignore[attr-defined]
            scorer.on_dispatched(request, result)
            done.append((request, result))
            assert owner.setdefault(g, EPS[best].address) == EPS[best].address, (g, round_)
        for request, result in done:  # a round's requests are in flight together
            scorer.on_completed(request, result, DONE)
    assert len(set(owner.values())) == 4  # new groups were placed by load, over the whole fleet


def test_owner_over_the_bound_spills_to_one_second_owner_not_everywhere() -> None:
    scorer = make(loadFactor=1.25, minLoadBound=2, maxImbalance=100)
    fleet = Fleet(scorer)
    primary, _, _ = fleet.send(group_prompt(7, unique=0))  # kept in flight: the group gets hot
    inflight = []
    targets = []
    for u in range(1, 40):
        address, request, _ = fleet.send(group_prompt(7, unique=u))
        inflight.append(request)
        targets.append(address)
    # The primary took requests while under the bound; then one spill owner; then (both over) the
    # least loaded endpoints, each becoming the newest spill owner in turn.
    assert targets[0] == primary
    spill = next(t for t in targets if t != primary)
    first_spill_at = targets.index(spill)
    assert all(t == primary for t in targets[:first_spill_at])
    for request in inflight:
        fleet.complete(request)
    # Load gone: the group goes back to its primary.
    assert fleet.send(group_prompt(7, unique=99))[0] == primary


@settings(max_examples=200, deadline=None)  # a property, not a timing: no per-example deadline
@given(
    loads=st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=8),
    owners=st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=4, unique=True),
    factor=st.floats(min_value=1.0, max_value=3.0),
    floor=st.integers(min_value=1, max_value=20),
    imbalance=st.integers(min_value=1, max_value=20),
    spill=st.sampled_from(["load", "balanced"]),
)
def test_never_scores_an_endpoint_above_the_load_bound(
    loads: list[int], owners: list[int], factor: float, floor: int, imbalance: int, spill: str
) -> None:
    # The bound alone (spillShare 0); test_burst_rule_never_passes_the_hard_bound covers the burst rule.
    scorer = make(
        loadFactor=factor, minLoadBound=floor, maxImbalance=imbalance, spillPlacement=spill, spillShare=0
    )
    eps = [Endpoint(f"10.1.0.{i}:8000") for i in range(len(loads))]
    for i, n in enumerate(loads):
        for k in range(n):
            scorer.tracker.dispatch(f"{i}-{k}", [eps[i].address])
    text = group_prompt(3)
    hashes = scorer.hashes(None, req(text, "x"))
    for o in owners:
        scorer.owners.record(hashes, f"10.1.0.{o}:8000")
    scores = scorer.score(CycleState(), req(text, "probe"), eps)
    bound = min(load_bound(sum(loads), len(loads), factor, floor), min(loads) + imbalance)
    chosen = [i for i, s in enumerate(scores) if s > 0]
    assert all(loads[i] + 1 <= bound for i in chosen)
    recorded = scorer.owners.lookup(hashes)[1]
    index = {e.address: i for i, e in enumerate(eps)}
    eligible = [a for a in recorded if a in index and loads[index[a]] + 1 <= bound]
    if eligible:  # the first eligible owner, in assignment order, alone
        assert chosen == [index[eligible[0]]]
    elif spill == "load":
        assert not chosen
    else:  # a balanced spill: every endpoint under the bound (no placements: all equally light)
        assert chosen == [i for i, n in enumerate(loads) if n + 1 <= bound]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=300))
def test_memory_bound_held_whatever_the_traffic(prompt_ids: list[int]) -> None:
    scorer = make(maxIndexBytes=64 * 1024)
    fleet = Fleet(scorer)
    for pid in prompt_ids:
        _, request, _ = fleet.send(group_prompt(pid % 1000, blocks=1 + pid % 50, unique=pid))
        fleet.complete(request)
        assert len(scorer.owners) <= scorer.owners.max_entries == (64 * 1024 - 8 * 1024) // ENTRY_BYTES
        assert len(scorer.placements) <= scorer.placements.max_entries == 8 * 1024 // 200
    assert len(scorer._pending) == 0


def test_removed_endpoints_lose_their_prefixes() -> None:
    fleet = Fleet(make())
    owner, _request, _ = fleet.send(group_prompt(5))
    fleet.scorer.on_endpoints_removed(frozenset({owner}))
    assert fleet.scorer.tracker.requests(owner) == 0
    assert fleet.scorer.score(CycleState(), req(group_prompt(5, unique=3), "z"), EPS) == [0.0] * 4


# -- spillShare: a burst of other prefixes is waited out, a hot prefix spills ----------------------


def _loaded(
    scorer: PrefixAffinityScorer, eps: list[Endpoint], loads: list[int], mine: list[int], key: int
) -> None:
    """Put ``loads[i]`` requests in flight on ``eps[i]``, ``mine[i]`` of them of the prefix ``key``."""
    for i, n in enumerate(loads):
        for k in range(n):
            rid = f"{i}-{k}"
            scorer.tracker.dispatch(rid, [eps[i].address], key=key if k < mine[i] else -1 - k)


def test_an_owner_busy_with_other_prefixes_keeps_the_prefix_a_hot_prefix_spills() -> None:
    text = group_prompt(7)
    for share, mine, stays in ((0.5, 2, True), (0.5, 6, False), (0.0, 2, False)):
        scorer = make(maxImbalance=8, spillShare=share, maxBurstImbalance=16)
        hashes = scorer.hashes(None, req(text, "x"))
        scorer.owners.record(hashes, EPS[0].address)
        # The owner has 10 in flight (over least + 8 = 9), ``mine`` of them of this group.
        _loaded(scorer, EPS, [10, 1, 1, 1], [mine, 0, 0, 0], hashes[0])
        scores = scorer.score(CycleState(), req(group_prompt(7, unique=5), "probe"), EPS)
        assert (scores[0] > 0) == stays, (share, mine, scores)
        if not stays:  # the spill goes elsewhere (balanced: every light endpoint under the bound)
            assert scores[0] == 0 and any(s > 0 for s in scores[1:])


def test_a_burst_is_waited_out_only_up_to_max_burst_imbalance() -> None:
    text = group_prompt(7)
    scorer = make(maxImbalance=4, spillShare=0.5, maxBurstImbalance=6)
    hashes = scorer.hashes(None, req(text, "x"))
    scorer.owners.record(hashes, EPS[0].address)
    _loaded(scorer, EPS, [7, 0, 1, 1], [0, 0, 0, 0], hashes[0])  # 7 + 1 > 0 + 6: the hard cap
    assert scorer.score(CycleState(), req(group_prompt(7, unique=5), "probe"), EPS)[0] == 0


def test_completions_release_the_prefix_counts() -> None:
    fleet = Fleet(make(spillShare=0.5))
    _address, request, _ = fleet.send(group_prompt(3))
    assert sum(fleet.scorer.tracker.key_counts.values()) == 1
    fleet.complete(request)
    assert fleet.scorer.tracker.key_counts == {} and len(fleet.scorer.tracker) == 0


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    owners=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=3, unique=True),
    share=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    imbalance=st.integers(min_value=1, max_value=12),
    burst=st.integers(min_value=1, max_value=24),
)
def test_burst_rule_never_passes_the_hard_bound(
    data: st.DataObject, owners: list[int], share: float, imbalance: int, burst: int
) -> None:
    loads = data.draw(st.lists(st.integers(min_value=0, max_value=40), min_size=6, max_size=6))
    mine = [data.draw(st.integers(min_value=0, max_value=n)) for n in loads]
    scorer = make(minLoadBound=4, maxImbalance=imbalance, spillShare=share, maxBurstImbalance=burst)
    eps = [Endpoint(f"10.2.0.{i}:8000") for i in range(6)]
    text = group_prompt(9)
    hashes = scorer.hashes(None, req(text, "x"))
    for o in owners:
        scorer.owners.record(hashes, eps[o].address)
    _loaded(scorer, eps, loads, mine, hashes[0])
    scores = scorer.score(CycleState(), req(text, "probe"), eps)
    bound = load_bound(sum(loads), 6, 2.0, 4)
    ceiling = min(bound, min(loads) + imbalance)
    hard = min(bound, min(loads) + burst)
    recorded = scorer.owners.lookup(hashes)[1]
    index = {e.address: i for i, e in enumerate(eps)}
    eligible = [index[a] for a in recorded if loads[index[a]] + 1 <= ceiling]
    waiting = [
        index[a] for a in recorded if loads[index[a]] + 1 <= hard and mine[index[a]] < share * loads[index[a]]
    ]
    chosen = [i for i, s in enumerate(scores) if s > 0]
    if eligible:
        assert chosen == eligible[:1]
    elif waiting and share > 0:
        assert chosen == waiting[:1]  # the owner keeps it: a burst of other prefixes
    else:  # a spill: only endpoints under the ordinary ceiling
        assert all(loads[i] + 1 <= ceiling for i in chosen)
    assert all(loads[i] + 1 <= max(ceiling, hard) for i in chosen)


# -- slower servers: capacity share (slowSpeedRatio) --------------------------------------------------


def _slow_fleet(
    per_group: list[int], others: int, **parameters: Any
) -> tuple[PrefixAffinityScorer, FakeClock, list[str]]:
    """A scorer on EPS whose endpoint 0 decodes at half the others' speed and owns one group per entry
    of ``per_group``, each dispatched that many times there; ``others`` unique prompts go to the other
    three endpoints. Every dispatch completes with its endpoint's decode time (all at one instant)."""
    clock = FakeClock(100.0)
    scorer = PrefixAffinityScorer("affinity", clock, _params(**{"speedSamples": 8, **parameters}))
    texts = [group_prompt(g) for g in range(len(per_group))]
    n = 0

    def send(text: str, ep: Endpoint, per_token: float) -> None:
        nonlocal n
        n += 1
        r = req(text, f"d{n}")
        scorer.on_dispatched(r, routed(ep))
        scorer.on_completed(r, routed(ep), _streamed(per_token * 15))

    for text, count in zip(texts, per_group, strict=True):
        for i in range(count):
            send(text if i == 0 else text + f" again {i}", EPS[0], 0.024)
    for i in range(others):
        send(f"unique prompt {i}", EPS[1 + i % 3], 0.012)
    return scorer, clock, texts


def _params(**parameters: Any) -> PrefixAffinityParams:
    plugin = factory("affinity", parameters, PluginHandle())
    assert isinstance(plugin, PrefixAffinityScorer)
    return plugin.params


def _streamed(decode: float) -> Completion:
    return Completion(Outcome.OK, 200, usage=Usage(completion_tokens=16), decode_seconds=decode)


def test_a_slow_server_sheds_the_prefixes_that_make_its_excess_share() -> None:
    # endpoint 0 holds 14 of 42 dispatches (a third) against a capacity share of 0.5 / 3.5 = 1/7:
    # groups 0 and 1 (6 each, 1/7 each) must go; group 2 (2 of 42) can stay
    scorer, _, (a, b, c) = _slow_fleet([6, 6, 2], others=28)
    slow = EPS[0].address
    assert scorer.slow.speeds.slow == {slow}
    assert scorer.slow.speeds.speeds[slow] == pytest.approx(0.5)
    assert scorer.capped(EPS) == {slow}
    first = scorer.score(CycleState(), req(a, "a1"), EPS)
    assert first[0] == 0.0 and max(first[1:]) > 0.0  # group 0 spills off the slow server
    assert scorer.score(CycleState(), req(b, "b1"), EPS)[0] == 0.0  # without group 0: 8/42 >= 1/7
    assert scorer.score(CycleState(), req(c, "c1"), EPS)[0] > 0.0  # without both: 2/42 < 1/7, it stays
    new = scorer.score(CycleState(), req(group_prompt(7), "new"), EPS)
    assert new[0] == 0.0 and new[1:] == [1.0, 1.0, 1.0]  # no new prefix on a capped slow server
    assert scorer.dump_state()["diverted"] == {slow: 2} and scorer.slow.diversions == 2


def test_one_diverted_prefix_is_enough_and_comes_back_below_the_share() -> None:
    scorer, _, (a, b) = _slow_fleet([4, 4], others=32)  # 8 of 40 = 0.2 against 1/7
    slow = EPS[0].address
    assert scorer.score(CycleState(), req(a, "a1"), EPS)[0] == 0.0  # group 0 diverted
    assert scorer.score(CycleState(), req(b, "b1"), EPS)[0] > 0.0  # 4/40 < 1/7 without it: b stays
    for n in range(40):  # the others take the traffic: endpoint 0 falls below its share
        scorer.on_dispatched(req(f"later {n}", f"l{n}"), routed(EPS[1 + n % 3]))
    assert scorer.capped(EPS) == frozenset()
    assert scorer.score(CycleState(), req(a, "a2"), EPS)[0] > 0.0  # back on its owner
    assert scorer.slow.diversions == 1 and scorer.dump_state()["diverted"] == {slow: 1}


def test_equal_servers_or_ratio_zero_cap_nothing() -> None:
    off, _, (a, _) = _slow_fleet([6, 6], others=20, slowSpeedRatio=0.0)
    assert off.slow.speeds.slow == frozenset() and off.capped(EPS) == frozenset()
    assert off.score(CycleState(), req(a, "a1"), EPS)[0] > 0.0
    lenient, _, (a, _) = _slow_fleet([6, 6], others=20, slowSpeedRatio=0.4)  # 0.5 is not slow enough
    assert lenient.slow.speeds.slow == frozenset()
    assert lenient.score(CycleState(), req(a, "a1"), EPS)[0] > 0.0
    lenient.on_endpoints_removed(frozenset({EPS[0].address}))
    assert (
        lenient.slow.shares.share(EPS[0].address) == 0.0 and EPS[0].address not in lenient.slow.speeds.speeds
    )
