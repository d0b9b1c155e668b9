"""prefix-affinity-scorer with ``newPrefixPlacement: hash``: replica-independent placement of new prefixes.

Properties: the rendezvous weight is fixed by its formula (no per-process seed), independent replicas
agree on a new prefix's owner whenever they see the same eligible endpoints, placement never exceeds
the load bound, prefixes spread evenly, and spills go to the next-ranked eligible endpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plugin_builders import DONE, routed

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix.affinity import PrefixAffinityScorer, factory, load_bound
from scheduler.plugins.prefix.rendezvous import rank, weight
from scheduler.types import Endpoint, LLMRequest

BLOCK = 64  # characters per block at the default blockSizeTokens (16 x 4)


def make(**parameters: Any) -> PrefixAffinityScorer:
    plugin = factory("affinity", {"newPrefixPlacement": "hash", **parameters}, PluginHandle())
    assert isinstance(plugin, PrefixAffinityScorer)
    return plugin


def fleet(n: int) -> list[Endpoint]:
    return [Endpoint(f"10.2.0.{i}:8000") for i in range(n)]


def req(text: str, rid: str) -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=text)


def prompt(group: int, unique: int = 0, blocks: int = 10) -> str:
    shared = "".join(f"g{group:06d}b{b:03d}".ljust(BLOCK, "x") for b in range(blocks))
    return shared + f"q{unique:06d}".ljust(2 * BLOCK, "y")


def load(scorer: PrefixAffinityScorer, eps: list[Endpoint], loads: list[int], tag: str = "bg") -> None:
    for i, n in enumerate(loads):
        for k in range(n):
            scorer.tracker.dispatch(f"{tag}-{i}-{k}", [eps[i].address])


def placed(scores: list[float]) -> int | None:
    chosen = [i for i, s in enumerate(scores) if s > 0]
    assert len(chosen) <= 1
    return chosen[0] if chosen else None


def test_weight_is_fixed_by_its_formula_not_by_the_process() -> None:
    assert weight(0x1234, "10.0.0.1:8000") == 5986019197428133374
    assert weight(2**70 + 5, "a") == weight(5, "a") == 8353252587555660248  # key taken modulo 2^64
    code = "from scheduler.plugins.prefix.rendezvous import weight; print(weight(0x1234, '10.0.0.1:8000'))"
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
        )
        assert out.stdout.strip() == "5986019197428133374"


@given(st.integers(min_value=0, max_value=2**64 - 1), st.permutations([f"10.3.0.{i}:8000" for i in range(6)]))
def test_rank_does_not_depend_on_the_order_endpoints_are_given_in(key: int, addresses: list[str]) -> None:
    ordered = [addresses[i] for i in rank(key, addresses)]
    canonical = sorted(addresses)
    assert ordered == [canonical[i] for i in rank(key, canonical)]
    assert [weight(key, a) for a in ordered] == sorted((weight(key, a) for a in addresses), reverse=True)


def test_new_prefix_goes_to_its_top_ranked_endpoint_and_stays() -> None:
    eps = fleet(4)
    scorer = make()
    request = req(prompt(1), "r1")
    hashes = scorer.hashes(None, request)
    scores = scorer.score(CycleState(), request, eps)
    top = rank(hashes[0], [e.address for e in eps])[0]
    assert scores == [1.0 if i == top else 0.0 for i in range(4)]
    scorer.on_dispatched(request, routed(eps[top]))
    scorer.on_completed(request, routed(eps[top]), DONE)
    again = scorer.score(CycleState(), req(prompt(1, unique=2), "r2"), eps)
    assert placed(again) == top and 0.5 < again[top] < 1.0  # now an owner: its owned fraction


@settings(max_examples=300, deadline=None)  # a property, not a timing
@given(
    loads_a=st.lists(st.integers(min_value=0, max_value=40), min_size=2, max_size=8),
    extra=st.lists(st.integers(min_value=-10, max_value=10), min_size=8, max_size=8),
    group=st.integers(min_value=0, max_value=10**6),
    factor=st.floats(min_value=1.0, max_value=3.0),
    floor=st.integers(min_value=1, max_value=20),
    imbalance=st.integers(min_value=1, max_value=20),
)
def test_independent_replicas_agree_whenever_they_see_the_same_eligible_endpoints(
    loads_a: list[int], extra: list[int], group: int, factor: float, floor: int, imbalance: int
) -> None:
    """Two scorers with different in-flight views (replicas) place a new prefix on the first endpoint,
    in rendezvous order, that each sees eligible; never above its own load bound."""
    eps = fleet(len(loads_a))
    loads_b = [max(0, n + d) for n, d in zip(loads_a, extra, strict=False)]
    chosen, eligible = [], []
    for loads in (loads_a, loads_b):
        scorer = make(loadFactor=factor, minLoadBound=floor, maxImbalance=imbalance)
        load(scorer, eps, loads)
        request = req(prompt(group), "probe")
        key = scorer.hashes(None, request)[0]
        bound = min(load_bound(sum(loads), len(loads), factor, floor), min(loads) + imbalance)
        ok = [i for i in rank(key, [e.address for e in eps]) if loads[i] + 1 <= bound]
        got = placed(scorer.score(CycleState(), request, eps))
        assert got == (ok[0] if ok else None)  # the top-ranked eligible endpoint; never over the bound
        chosen.append(got)
        eligible.append(ok)
    if eligible[0] and eligible[0][0] in eligible[1] and eligible[1][0] in eligible[0]:
        assert chosen[0] == chosen[1]
    if set(eligible[0]) == set(eligible[1]):
        assert chosen[0] == chosen[1]


@pytest.mark.parametrize(("n", "critical"), [(4, 16.27), (8, 24.32), (16, 37.70)])  # chi2, p = 0.001
def test_new_prefixes_spread_evenly_over_the_endpoints(n: int, critical: float) -> None:
    eps = fleet(n)
    scorer = make()
    counts = [0] * n
    prefixes = 400 * n
    for g in range(prefixes):
        got = placed(scorer.score(CycleState(), req(prompt(g, blocks=1), f"r{g}"), eps))
        assert got is not None
        counts[got] += 1
    expected = prefixes / n
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    assert chi2 < critical, counts


def test_removing_an_endpoint_moves_only_its_own_prefixes() -> None:
    eps = fleet(6)
    scorer = make()
    before = {g: placed(scorer.score(CycleState(), req(prompt(g), f"a{g}"), eps)) for g in range(600)}
    kept = eps[:3] + eps[4:]
    after = {g: placed(scorer.score(CycleState(), req(prompt(g), f"b{g}"), kept)) for g in range(600)}
    for g, i in before.items():
        assert i is not None
        if i != 3:
            assert kept[after[g]] == eps[i]  # type: ignore[index]


def test_spill_goes_to_the_next_ranked_eligible_endpoint_on_every_replica() -> None:
    eps = fleet(4)
    text = prompt(9, unique=1)
    spills = []
    for replica in range(2):
        scorer = make(loadFactor=1.0, minLoadBound=2, maxImbalance=100)
        request = req(text, f"first{replica}")
        order = rank(scorer.hashes(None, request)[0], [e.address for e in eps])
        scorer.score(CycleState(), request, eps)
        scorer.on_dispatched(request, routed(eps[order[0]]))  # the primary owner
        load(scorer, eps, [5 if i == order[0] else replica for i in range(4)], tag=f"r{replica}")
        scores = scorer.score(CycleState(), req(prompt(9, unique=2), f"s{replica}"), eps)
        spill = placed(scores)
        assert spill == order[1]  # the next-ranked endpoint (all others under the bound)
        assert 0.5 < scores[spill] < 1.0  # the owned fraction d / t, as an owner would score
        spills.append(spill)
    assert spills[0] == spills[1]


def test_load_placement_is_unchanged_and_the_parameter_is_validated() -> None:
    plain = factory("affinity", {}, PluginHandle())
    assert isinstance(plain, PrefixAffinityScorer)
    assert plain.params.new_prefix_placement == "load"
    assert plain.score(CycleState(), req(prompt(1), "r"), fleet(4)) == [0.0] * 4
    with pytest.raises(ConfigError, match="newPrefixPlacement"):
        make(newPrefixPlacement="random")


def place_groups(scorer: PrefixAffinityScorer, eps: list[Endpoint], groups: list[int]) -> dict[int, str]:
    """Send each group's first prompt (completed at once) and return where each was placed."""
    out = {}
    for g in groups:
        request = req(prompt(g), f"p{g}")
        chosen = placed(scorer.score(CycleState(), request, eps))
        assert chosen is not None
        scorer.on_dispatched(request, routed(eps[chosen]))
        scorer.on_completed(request, routed(eps[chosen]), DONE)
        out[g] = eps[chosen].address
    return out


@pytest.mark.parametrize(
    ("factor", "groups", "n"), [(1.0, 24, 4), (1.25, 24, 4), (1.25, 16, 4), (1.5, 64, 8)]
)
def test_new_prefixes_are_bounded_per_endpoint(factor: float, groups: int, n: int) -> None:
    """Consistent hashing with bounded loads over prefixes: no endpoint holds more than its share."""
    eps = fleet(n)
    scorer = make(prefixLoadFactor=factor)
    where = place_groups(scorer, eps, list(range(groups)))
    held = [list(where.values()).count(e.address) for e in eps]
    assert max(held) <= -(-factor * groups // n), held
    assert scorer.placements.counts == {e.address: c for e, c in zip(eps, held, strict=True) if c}
    if factor == 1.0:
        assert set(held) == {groups // n}
    # the same sequence of new prefixes gives the same placement on another replica
    assert place_groups(make(prefixLoadFactor=factor), eps, list(range(groups))) == where


def test_placements_are_lru_bounded_and_forget_removed_endpoints() -> None:
    eps = fleet(4)
    scorer = make(maxIndexBytes=64 * 1024)
    limit = scorer.placements.max_entries
    assert limit == 64 * 1024 // 8 // 200 and scorer.owners.max_entries == (64 * 1024 - 64 * 1024 // 8) // 160
    place_groups(scorer, eps, list(range(limit + 50)))
    assert len(scorer.placements) == limit == sum(scorer.placements.counts.values())
    gone = eps[0].address
    scorer.on_endpoints_removed(frozenset({gone}))
    assert gone not in scorer.placements.counts
    assert len(scorer.placements) == sum(scorer.placements.counts.values())


def test_load_placement_with_load_spills_remembers_no_placements() -> None:
    plain = factory("affinity", {"spillPlacement": "load"}, PluginHandle())
    assert isinstance(plain, PrefixAffinityScorer)
    for g in range(10):
        request = req(prompt(g), f"l{g}")
        plain.score(CycleState(), request, fleet(4))
        plain.on_dispatched(request, routed(fleet(4)[g % 4]))
    assert len(plain.placements) == 0 and len(plain.owners) > 0
