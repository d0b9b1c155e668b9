"""prefix-affinity-scorer with ``newPrefixPlacement: balanced``: new prefixes and spills go to the
endpoints holding at most the mean footprint of placed prefixes (blocks), among those under the load
bound; the load scorers choose among them.

Properties: the footprint bookkeeping equals a model of it under any sequence of records, touches,
expiries and removals; equal prefixes spread evenly whatever the load scorers would pick; a long prefix
weighs its blocks; never above the load bound; spills prefer the lighter endpoints; placements unused
for ``placementWindow`` stop counting; memory per placement within its documented bound.
"""

from __future__ import annotations

import random
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plugin_builders import DONE, FakeClock, routed

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix.affinity import PrefixAffinityScorer, factory
from scheduler.plugins.prefix.rendezvous import PLACEMENT_BYTES, Placements
from scheduler.types import Endpoint, LLMRequest

BLOCK = 64  # characters per block at the default blockSizeTokens (16 x 4)


def make(clock: FakeClock | None = None, **parameters: Any) -> PrefixAffinityScorer:
    handle = PluginHandle(clock=clock) if clock is not None else PluginHandle()
    plugin = factory("affinity", {"newPrefixPlacement": "balanced", **parameters}, handle)
    assert isinstance(plugin, PrefixAffinityScorer)
    return plugin


def fleet(n: int) -> list[Endpoint]:
    return [Endpoint(f"10.4.0.{i}:8000") for i in range(n)]


def req(text: str, rid: str) -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=text)


def prompt(group: int, unique: int = 0, blocks: int = 10) -> str:
    shared = "".join(f"g{group:06d}b{b:03d}".ljust(BLOCK, "x") for b in range(blocks))
    return shared + f"q{unique:06d}".ljust(2 * BLOCK, "y")


def send(
    scorer: PrefixAffinityScorer, eps: list[Endpoint], text: str, rid: str, pick: int, complete: bool = True
) -> list[float]:
    """Score ``text``, dispatch it to the highest-scored endpoint (ties: the one of index ``pick`` if
    among them, else the first), complete it at once if ``complete``; return the scores."""
    request = req(text, rid)
    scores = scorer.score(CycleState(), request, eps)
    top = max(scores)
    tied = [i for i, s in enumerate(scores) if s == top]
    chosen = pick if pick in tied else tied[0]
    scorer.on_dispatched(request, routed(eps[chosen]))
    if complete:
        scorer.on_completed(request, routed(eps[chosen]), DONE)
    return scores


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["record", "touch", "expire", "remove"]),
            st.integers(0, 30),
            st.integers(0, 3),
            st.integers(1, 200),
            st.floats(0, 50),
        ),
        max_size=120,
    )
)
def test_footprint_bookkeeping_matches_a_model(ops: list[tuple[str, int, int, int, float]]) -> None:
    table = Placements(max_entries=12, window=20.0)
    model: dict[int, tuple[str, int, float]] = {}
    order: list[int] = []
    now = 0.0
    for op, key, endpoint, weight, step in ops:
        now += step
        address = f"e{endpoint}"
        if op == "record":
            model[key] = (address, weight, now)
            order = [k for k in order if k != key] + [key]
            table.record(key, address, weight, now)
            while len(order) > 12:
                del model[order.pop(0)]
        elif op == "touch":
            table.touch(key, now)
            if key in model:
                model[key] = (model[key][0], model[key][1], now)
                order = [k for k in order if k != key] + [key]
        elif op == "expire":
            table.expire(now)
            for k in [k for k in order if now - model[k][2] > 20.0]:
                del model[k]
            order = [k for k in order if k in model]
        else:
            table.remove([address])
            for k in [k for k in order if model[k][0] == address]:
                del model[k]
            order = [k for k in order if k in model]
        sums: dict[str, int] = {}
        for a, w, _ in model.values():
            sums[a] = sums.get(a, 0) + w
        assert table.counts == sums
        assert table.total == sum(sums.values())
        assert len(table) == len(model) <= 12
        assert {k: table.get(k) for k in model} == {k: v[0] for k, v in model.items()}


@pytest.mark.parametrize(("groups", "n"), [(24, 4), (12, 4), (64, 8), (7, 3)])
def test_equal_prefixes_spread_evenly_whatever_load_prefers(groups: int, n: int) -> None:
    """The load scorers would put every new prefix on endpoint 0 (``pick=0``); balance overrides."""
    eps = fleet(n)
    scorer = make()
    for g in range(groups):
        scores = send(scorer, eps, prompt(g), f"p{g}", pick=0)
        assert max(scores) == 1.0
    held = [scorer.placements.counts.get(e.address, 0) // 12 for e in eps]  # 12 blocks per prompt
    assert sum(held) == groups and max(held) - min(held) <= 1, held


def test_a_long_prefix_weighs_its_blocks() -> None:
    eps = fleet(4)
    scorer = make()
    send(scorer, eps, prompt(0, blocks=120), "big", pick=0)  # endpoint 0 holds 122 blocks
    for g in range(1, 12):
        scores = send(scorer, eps, prompt(g, blocks=10), f"s{g}", pick=0)
        assert scores[0] == 0.0, f"prefix {g} offered to the endpoint holding the long prefix"
    assert scorer.placements.counts[eps[0].address] == 122
    # an endpoint is offered a prefix only at or below the mean: none exceeds it by more than a prompt,
    # even with ties broken against balance (``pick=0``: the first offered)
    others = [scorer.placements.counts.get(e.address, 0) for e in eps[1:]]
    assert sum(others) == 132 and max(others) <= (122 + 132) / 4 + 12


def test_never_above_the_load_bound() -> None:
    eps = fleet(4)
    scorer = make(minLoadBound=2, maxImbalance=2)
    for k in range(3):  # endpoint 1 (the lightest footprint) has 3 requests in flight, least + 2 < 4
        scorer.tracker.dispatch(f"bg{k}", [eps[1].address])
    send(scorer, eps, prompt(0), "a", pick=0)
    send(scorer, eps, prompt(1), "b", pick=2)
    send(scorer, eps, prompt(2), "c", pick=3)
    scores = scorer.score(CycleState(), req(prompt(3), "d"), eps)
    assert scores == [0.0, 0.0, 0.0, 0.0]  # only endpoint 1 is at or below the mean, and it is over
    # with endpoint 1 relieved, it is the only candidate
    for k in range(3):
        scorer.tracker.complete(f"bg{k}")
    assert scorer.score(CycleState(), req(prompt(3), "d"), eps) == [0.0, 1.0, 0.0, 0.0]


def test_a_spill_goes_to_the_lighter_endpoints_with_the_depth_score() -> None:
    eps = fleet(4)
    scorer = make(minLoadBound=1, maxImbalance=1, maxOwners=2)
    for g in range(4):
        send(scorer, eps, prompt(g), f"p{g}", pick=g)  # one prefix per endpoint
    send(scorer, eps, prompt(4), "p4", pick=1)  # endpoint 1 now holds two
    owner = scorer.owners.lookup(scorer.hashes(None, req(prompt(0), "x")))[1][0]
    assert owner == eps[0].address
    scorer.tracker.dispatch("busy", [eps[0].address])  # the owner is over its bound (least + 1)
    scores = scorer.score(CycleState(), req(prompt(0, unique=9), "q"), eps)
    depth_score = 10 / 12  # the shared 10 blocks of a 12-block prompt
    assert scores[0] == 0.0 and scores[1] == 0.0
    assert scores[2] == scores[3] == pytest.approx(depth_score)


def test_placements_unused_for_the_window_stop_counting() -> None:
    clock = FakeClock(1000.0)
    eps = fleet(2)
    scorer = make(clock, placementWindow="60s")
    send(scorer, eps, prompt(0), "a", pick=0)
    clock.now += 30
    send(scorer, eps, prompt(0, unique=1), "a2", pick=0)  # a later request touches group 0
    send(scorer, eps, prompt(1), "b", pick=1)
    clock.now += 45  # group 0 last used 45 s ago, group 1 placed 45 s ago: both still count
    assert scorer.score(CycleState(), req(prompt(2), "c"), eps) == [1.0, 1.0]
    clock.now += 20  # 65 s: both expire
    scorer.score(CycleState(), req(prompt(2), "c"), eps)
    assert len(scorer.placements) == 0 and scorer.placements.total == 0
    with pytest.raises(ConfigError, match="placementWindow"):
        make(placementWindow="0s")


def test_the_window_applies_to_hash_placement_too() -> None:
    clock = FakeClock(1000.0)
    eps = fleet(2)
    scorer = make(clock, newPrefixPlacement="hash", placementWindow="10s")
    send(scorer, eps, prompt(0), "a", pick=0)
    assert len(scorer.placements) == 1 and scorer.placements.total == 1  # hash counts prefixes
    clock.now += 11
    scorer.score(CycleState(), req(prompt(1), "b"), eps)
    assert len(scorer.placements) == 0


def test_placement_memory_with_real_weights_and_times() -> None:
    """A placement (address, blocks, last use) costs at most PLACEMENT_BYTES (which sizes the table)."""
    entries = 20000
    rng = random.Random(3)
    addresses = [f"10.0.{i // 256}.{i % 256}:8000" for i in range(16)]
    keys = [rng.getrandbits(64) for _ in range(entries + 500)]
    table = Placements(entries, window=600.0)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i, key in enumerate(keys):
        table.record(key, addresses[i % 16], 300 + i % 700, 1000.0 + i * 0.001)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(table) == entries
    assert used / entries <= PLACEMENT_BYTES, f"{used / entries:.0f} bytes per entry"


def test_the_default_places_new_prefixes_by_load_and_spills_by_footprint() -> None:
    """``newPrefixPlacement: load`` with ``spillPlacement: balanced`` (both defaults)."""
    eps = fleet(4)
    scorer = make(newPrefixPlacement="load", minLoadBound=1, maxImbalance=1)
    assert scorer.params.spill_placement == "balanced"
    for g in range(4):
        assert send(scorer, eps, prompt(g), f"p{g}", pick=g) == [0.0] * 4  # load decides
    send(scorer, eps, prompt(4), "p4", pick=1)  # endpoint 1 now holds two prefixes
    assert scorer.placements.counts[eps[1].address] == 24
    scorer.tracker.dispatch("busy", [eps[0].address])  # the owner of group 0 is over its bound
    scores = scorer.score(CycleState(), req(prompt(0, unique=9), "q"), eps)
    assert scores[:2] == [0.0, 0.0] and scores[2] == scores[3] == pytest.approx(10 / 12)
    # with load spills, the same state leaves the spill to the load scorers
    plain = make(newPrefixPlacement="load", spillPlacement="load", minLoadBound=1, maxImbalance=1)
    for g in range(4):
        send(plain, eps, prompt(g), f"p{g}", pick=g)
    plain.tracker.dispatch("busy", [eps[0].address])
    assert plain.score(CycleState(), req(prompt(0, unique=9), "q"), eps) == [0.0] * 4
