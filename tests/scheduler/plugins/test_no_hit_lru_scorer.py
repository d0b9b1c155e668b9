import pytest
from plugin_builders import req, routed_pd

from scheduler.cycle_state import CycleState
from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch
from scheduler.plugins.scorers.no_hit_lru import NoHitLruParams, NoHitLruScorer
from scheduler.types import Endpoint, SchedulingResult

A, B, C, D = (Endpoint(f"10.0.0.{i}:8000") for i in range(4))


def cycle(matched: dict[str, int] | None) -> CycleState:
    c = CycleState()
    if matched is not None:
        c.write(PREFIX_MATCH, PrefixMatch((1, 2, 3), matched, 16, "prefix-cache-scorer"))
    return c


def send_cold(s: NoHitLruScorer, n: int, result: SchedulingResult) -> None:
    s.score(cycle(None), req(n), [A, B, C, D])
    s.on_dispatched(req(n), result)


@pytest.mark.parametrize(
    ("history", "matched", "expected"),
    [
        ([], None, [1.0, 2 / 3, 1 / 3, 0.0]),  # nothing used yet: input order
        ([], {}, [1.0, 2 / 3, 1 / 3, 0.0]),  # a match with no hits is cold
        ([], {A.address: 0}, [1.0, 2 / 3, 1 / 3, 0.0]),
        ([A], None, [0.0, 1.0, 2 / 3, 1 / 3]),  # used endpoint ranks after never-used ones
        ([A, C], None, [1 / 3, 1.0, 0.0, 2 / 3]),
        ([A, C, A], None, [0.0, 1.0, 1 / 3, 2 / 3]),
        ([A, B, C, D], None, [1.0, 2 / 3, 1 / 3, 0.0]),  # all used: oldest first
        ([A], {B.address: 1}, [0.5, 0.5, 0.5, 0.5]),  # prefix hit: neutral
    ],
)
def test_scores(history: list[Endpoint], matched: dict[str, int] | None, expected: list[float]) -> None:
    s = NoHitLruScorer("n")
    for n, e in enumerate(history):
        send_cold(s, n, routed_pd(e))
    assert s.score(cycle(matched), req(99), [A, B, C, D]) == pytest.approx(expected)


def test_warm_requests_do_not_touch_lru() -> None:
    s = NoHitLruScorer("n")
    s.score(cycle({A.address: 2}), req(1), [A, B])
    s.on_dispatched(req(1), routed_pd(A))
    s.on_dispatched(req(2), routed_pd(B))  # never scored: unknown, not counted
    assert s.score(cycle(None), req(3), [A, B]) == [1.0, 0.0]


def test_prefill_endpoint_counts_and_removal() -> None:
    s = NoHitLruScorer("n")
    send_cold(s, 1, routed_pd(A, prefill=B))  # A, then B, most recent
    assert s.score(cycle(None), req(2), [A, B, C]) == pytest.approx([0.5, 0.0, 1.0])
    s.on_endpoints_removed(frozenset({A.address, B.address}))
    assert s.score(cycle(None), req(3), [A, B, C]) == pytest.approx([1.0, 0.5, 0.0])


def test_lru_size_bounds_memory() -> None:
    s = NoHitLruScorer("n", NoHitLruParams(lru_size=2))
    for n, e in enumerate([A, B, C]):
        send_cold(s, n, routed_pd(e))
    assert list(s._last_used) == [B.address, C.address]


def test_single_candidate() -> None:
    assert NoHitLruScorer("n").score(cycle(None), req(1), [A]) == [1.0]


def test_prefix_plugin_name_parameter() -> None:
    from scheduler.errors import ConfigError
    from scheduler.handle import PluginHandle
    from scheduler.plugins.prefix import scorer as prefix_scorer
    from scheduler.plugins.scorers.no_hit_lru import factory
    from scheduler.plugins.scorers.running_requests import RunningRequestsSizeScorer

    handle = PluginHandle()
    handle.add(prefix_scorer.factory("my-prefix", {}, handle))
    handle.add(RunningRequestsSizeScorer("other"))
    s = factory("n", {"prefixPluginName": "my-prefix", "lruSize": 8}, handle)
    assert isinstance(s, NoHitLruScorer) and s.params == NoHitLruParams(8, "prefill", "my-prefix")
    with pytest.raises(ConfigError, match="no plugin named 'missing'"):
        factory("n", {"prefixPluginName": "missing"}, handle)
    with pytest.raises(ConfigError, match="not a prefix-cache-scorer"):
        factory("n", {"prefixPluginName": "other"}, handle)
