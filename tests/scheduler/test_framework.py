"""The profile run and the scheduler: filters, clamping, weights, shadow profiles, hooks, observer."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_fakes import (
    DropFilter,
    FirstPicker,
    FixedScorer,
    KeepFilter,
    RaisingPlugin,
    Recorder,
    RecordingHooks,
    RecordingObserver,
    request,
)

from scheduler.cycle_state import CycleState
from scheduler.errors import NoEndpointError, SchedulingError
from scheduler.handle import PluginHandle
from scheduler.plugins.handlers.single_profile import SingleProfileHandler
from scheduler.plugins.pickers.common import PickerParams
from scheduler.plugins.pickers.max_score import MaxScorePicker
from scheduler.profile import SchedulerProfile
from scheduler.registry import default_registry
from scheduler.scheduler import Scheduler
from scheduler.types import Completion, Endpoint, Outcome

A, B, C = (Endpoint(f"10.0.0.{i}:8000") for i in (1, 2, 3))
EPS = [A, B, C]


def max_picker(n: int = 1) -> MaxScorePicker:
    return MaxScorePicker("max", PickerParams(n), PluginHandle().rng("max"))


def one_profile(
    profile: SchedulerProfile, *plugins: object, observer: RecordingObserver | None = None
) -> Scheduler:
    handler = SingleProfileHandler("single")
    everything = [*plugins, handler]
    return Scheduler({profile.name: profile}, handler, everything, observer=observer)  # type: ignore[arg-type]


def test_filter_emptying_fails_profile_with_reason() -> None:
    profile = SchedulerProfile(
        "default", [DropFilter("drop-b", {B.address}), KeepFilter("only-b", {B.address})], [], max_picker()
    )
    with pytest.raises(NoEndpointError) as info:
        one_profile(profile).schedule(request(), EPS)
    assert info.value.reason == 'profile "default": filter keep-filter "only-b" removed every endpoint'


def test_filter_steps_record_removed_endpoints_and_reasons() -> None:
    profile = SchedulerProfile(
        "default", [DropFilter("drop-a", {A.address}), KeepFilter("keep-c", {C.address})], [], max_picker()
    )
    result = one_profile(profile).schedule(request(), EPS)
    assert result.addresses == (C.address,)
    assert result.decision is not None
    steps = result.decision.profiles[0].filters
    assert [(s.plugin_name, s.removed) for s in steps] == [
        ("drop-a", ((A.address, "filtered out"),)),
        ("keep-c", ((B.address, f"{B.address} not in keep list"),)),
    ]


def test_scores_are_clamped_weighted_and_summed() -> None:
    s1 = FixedScorer("s1", {A.address: 2.0, B.address: -1.0, C.address: 0.5})
    s2 = FixedScorer("s2", {A.address: 0.0, B.address: 1.0, C.address: float("nan")})
    profile = SchedulerProfile("default", [], [(s1, 1.0), (s2, 3.0)], max_picker(3))
    result = one_profile(profile).schedule(request(), EPS)
    decision = result.decision.profiles[0] if result.decision else None
    assert decision is not None
    assert decision.scores == {"s1": (1.0, 0.0, 0.5), "s2": (0.0, 1.0, 0.0)}
    assert decision.totals == (1.0, 3.0, 0.5)  # weights not renormalised
    assert result.addresses == (B.address, A.address, C.address)
    assert [t.score for t in result.profile_results["default"].targets] == [3.0, 1.0, 0.5]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.floats(-0.5, 1.5) | st.just(float("nan")), min_size=3, max_size=3),
            st.sampled_from([1.0, 0.5, 2.0, 3.0, 10.0, -1.0, 0.1]),
        ),
        min_size=1,
        max_size=70,  # past the lazily chained sums' materialisation every 32 scorers
    )
)
def test_totals_are_the_weighted_clamped_scores_added_in_scorer_order(
    table: list[tuple[list[float], float]],
) -> None:
    scorers = [
        (FixedScorer(f"s{i}", dict(zip((A.address, B.address, C.address), raw, strict=True))), weight)
        for i, (raw, weight) in enumerate(table)
    ]
    profile = SchedulerProfile("default", [], scorers, max_picker(3))
    result = one_profile(profile).schedule(request(), EPS)
    assert result.decision is not None
    expected = [0.0, 0.0, 0.0]
    for raw, weight in table:
        for i, value in enumerate(raw):
            clamped = 0.0 if value != value or value < 0.0 else min(value, 1.0)
            expected[i] = expected[i] + clamped * weight
    assert result.decision.profiles[0].totals == tuple(expected)


def test_shadow_profiles_run_but_are_never_routed() -> None:
    main = SchedulerProfile("main", [], [(FixedScorer("s", {A.address: 1.0}), 1.0)], max_picker())
    shadow = SchedulerProfile(
        "trial", [], [(FixedScorer("t", {C.address: 1.0}), 1.0)], max_picker(), shadow=True
    )
    failing_shadow = SchedulerProfile("broken", [KeepFilter("none", set())], [], max_picker(), shadow=True)
    handler = SingleProfileHandler("single")
    scheduler = Scheduler({"main": main, "trial": shadow, "broken": failing_shadow}, handler, [handler])
    result = scheduler.schedule(request(), EPS)
    assert result.primary_profile == "main" and result.addresses == (A.address,)
    assert result.profile_results["trial"].targets[0].endpoint == C
    assert result.profile_results["trial"].shadow is True
    assert "broken" not in result.profile_results
    assert result.decision is not None and result.decision.shadow_profiles == ("trial", "broken")
    assert [p.profile for p in result.decision.profiles] == ["main", "trial", "broken"]


def test_empty_pool_raises() -> None:
    profile = SchedulerProfile("default", [], [], max_picker())
    with pytest.raises(NoEndpointError, match="the pool is empty"):
        one_profile(profile).schedule(request(), [])


def test_plugin_exception_fails_profile_and_is_reported() -> None:
    observer = RecordingObserver()
    profile = SchedulerProfile("default", [], [(RaisingPlugin("boom"), 1.0)], max_picker())
    with pytest.raises(
        NoEndpointError, match='profile "default": score plugin raising "boom" failed: scorer exploded'
    ):
        one_profile(profile, observer=observer).schedule(request(), EPS)
    assert observer.errors == [("score", "boom", "scorer exploded")]
    assert observer.cycles == ["no_endpoint"]


@pytest.mark.parametrize(
    ("choose", "message"),
    [
        (lambda scored: [], "picked no endpoint"),
        (lambda scored: [scored[0], scored[0]], "picked an endpoint twice"),
    ],
)
def test_picker_contract_violations_fail_the_profile(choose: object, message: str) -> None:
    profile = SchedulerProfile("default", [], [], FirstPicker("bad", choose))  # type: ignore[arg-type]
    with pytest.raises(NoEndpointError, match=message):
        one_profile(profile).schedule(request(), EPS)


def test_scorer_returning_wrong_length_fails_the_profile() -> None:
    class Short(FixedScorer):
        def score(self, cycle, request, endpoints):  # type: ignore[no-untyped-def]
            return [1.0]

    profile = SchedulerProfile("default", [], [(Short("short", {}), 1.0)], max_picker())
    with pytest.raises(NoEndpointError, match="returned 1 scores for 3 endpoints"):
        one_profile(profile).schedule(request(), EPS)


def test_handler_picking_a_profile_twice_is_an_error() -> None:
    class Looping(SingleProfileHandler):
        def pick_profiles(self, cycle, request, profiles, results):  # type: ignore[no-untyped-def]
            return profiles

    profile = SchedulerProfile("default", [], [], max_picker())
    handler = Looping("loop")
    with pytest.raises(SchedulingError, match='picked profile "default" twice'):
        Scheduler({"default": profile}, handler, [handler]).schedule(request(), EPS)


def test_observer_called_per_plugin_and_cycle() -> None:
    observer = RecordingObserver()
    profile = SchedulerProfile(
        "default", [DropFilter("f", set())], [(FixedScorer("s", {}), 1.0)], max_picker()
    )
    one_profile(profile, observer=observer).schedule(request(), EPS)
    assert observer.plugins == [
        ("pick_profiles", "single-profile-handler", "single"),
        ("filter", "drop-filter", "f"),
        ("score", "fixed-scorer", "s"),
        ("pick", "max-score-picker", "max"),
        ("pick_profiles", "single-profile-handler", "single"),
        ("process_results", "single-profile-handler", "single"),
    ]
    assert observer.cycles == ["ok"]


def test_hooks_fan_out_and_contain_exceptions() -> None:
    recorder = Recorder()
    observer = RecordingObserver()
    hooks = RecordingHooks("rec", recorder)
    raising = RaisingPlugin("boom")
    profile = SchedulerProfile("default", [], [], max_picker())
    scheduler = one_profile(profile, raising, hooks, observer=observer)
    assert scheduler.has_chunk_hooks and scheduler.has_completion_hooks and scheduler.has_dispatch_hooks
    req = request("r1")
    result = scheduler.schedule(req, EPS)
    scheduler.dispatched(req, result)
    scheduler.response_headers(req, result, 200, {})
    scheduler.response_chunk(req, result, b"data")
    scheduler.completed(req, result, Completion(Outcome.OK))
    scheduler.endpoints_removed(frozenset({A.address}))
    scheduler.endpoints_removed(frozenset())
    assert recorder.calls == [
        ("dispatched", "r1"),
        ("headers", 200),
        ("chunk", b"data"),
        ("completed", Outcome.OK),
        ("removed", frozenset({A.address})),
    ]
    assert observer.errors == [
        ("dispatched", "boom", "dispatch hook exploded"),
        ("completed", "boom", "completion hook exploded"),
    ]
    assert ("response_chunk", "recording-hooks", "rec") in observer.plugins


def test_no_chunk_hooks_flag() -> None:
    profile = SchedulerProfile("default", [], [], max_picker())
    scheduler = one_profile(profile)
    assert not scheduler.has_chunk_hooks and not scheduler.has_response_header_hooks


def test_cycle_state_now_comes_from_injected_clock() -> None:
    seen: list[float] = []

    class Spy(FixedScorer):
        def score(self, cycle, request, endpoints):  # type: ignore[no-untyped-def]
            seen.append(cycle.now)
            return [0.0] * len(endpoints)

    profile = SchedulerProfile("default", [], [(Spy("spy", {}), 1.0)], max_picker())
    handler = SingleProfileHandler("single")
    Scheduler({"default": profile}, handler, [handler], clock=lambda: 42.5).schedule(request(), EPS)
    assert seen == [42.5]


@settings(max_examples=80, deadline=None)
@given(
    raw=st.lists(st.floats(-2.0, 3.0) | st.just(float("nan")), min_size=1, max_size=10),
    keep=st.sets(st.integers(0, 9)),
    weight=st.floats(0.0, 5.0),
    picker_type=st.sampled_from(["max-score-picker", "random-picker", "weighted-random-picker"]),
    n=st.integers(1, 4),
)
def test_profile_properties(
    raw: list[float], keep: set[int], weight: float, picker_type: str, n: int
) -> None:
    pool = [Endpoint(f"10.9.0.{i}:8000") for i in range(len(raw))]
    kept = {pool[i].address for i in keep if i < len(pool)}
    scorer = FixedScorer("s", {e.address: v for e, v in zip(pool, raw, strict=True)})
    picker = default_registry(entry_points=False).create(
        picker_type, "p", {"maxNumOfEndpoints": n}, PluginHandle(5)
    )
    profile = SchedulerProfile("default", [KeepFilter("keep", kept)], [(scorer, weight)], picker)  # type: ignore[arg-type]
    if not kept:
        with pytest.raises(NoEndpointError, match="removed every endpoint"):
            one_profile(profile).schedule(request(), pool)
        return
    result = one_profile(profile).schedule(request(), pool)
    assert result.decision is not None
    decision = result.decision.profiles[0]
    assert all(0.0 <= s <= 1.0 for s in decision.scores["s"])
    assert decision.totals == tuple(weight * s for s in decision.scores["s"])
    picked = result.addresses
    assert 1 <= len(picked) <= n and len(set(picked)) == len(picked) and set(picked) <= kept


def test_handler_result_without_endpoints_is_an_error() -> None:
    class Empty(SingleProfileHandler):
        def process_results(self, cycle, request, results):  # type: ignore[no-untyped-def]
            return dataclasses.replace(super().process_results(cycle, request, results), endpoints=())

    profile = SchedulerProfile("default", [], [], max_picker())
    handler = Empty("empty")
    with pytest.raises(SchedulingError, match='empty" returned a result without endpoints'):
        Scheduler({"default": profile}, handler, [handler]).schedule(request(), EPS)


def test_cycle_addresses_are_read_once_per_sequence() -> None:
    cycle = CycleState()
    first = cycle.addresses(EPS)
    assert first == (A.address, B.address, C.address) and cycle.addresses(EPS) is first
    others = [C, A]
    assert cycle.addresses(others) == (C.address, A.address)  # another sequence: read afresh
    assert cycle.addresses(EPS) == first
