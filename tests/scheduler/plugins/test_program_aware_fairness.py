"""``program-aware-fairness``: upstream's test tables (plugin_test.go, strategy_las_test.go,
programmetrics_test.go in llm-d-router's ``pkg/epp/framework/plugins/flowcontrol/fairness/program-aware``)
ported to the policy's Python contract, under a fake clock."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plugin_builders import FakeClock

from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.observer import NO_PLUGIN_METRICS, ProgramFairnessSource, ProgramSample
from scheduler.plugins import register_builtin
from scheduler.plugins.flowcontrol.interfaces import FlowHandle, FlowQueue, QueuedItem
from scheduler.plugins.flowcontrol.ordering import FcfsOrdering
from scheduler.plugins.flowcontrol.program_aware import (
    MAX_PROGRAMS,
    MAX_STASHED_WAITS,
    Program,
    ProgramAwareFairness,
    ProgramAwareParams,
    jains_index,
    range_normalize,
)
from scheduler.registry import Registry
from scheduler.types import Completion, LLMRequest, Outcome, SchedulingResult, Usage

REGISTRY = Registry()
register_builtin(REGISTRY)


class Item:
    def __init__(self, enqueued_at: float, request_id: str = "", seq: int = 0) -> None:
        self.enqueued_at = enqueued_at
        self.request_id = request_id
        self.seq = seq
        self.deadline = float("inf")
        self.removed = False


class Queue:
    def __init__(self, items: list[Item]) -> None:
        self.items: deque[QueuedItem] = deque(items)

    def push(self, item: QueuedItem) -> None:
        self.items.append(item)

    def peek(self) -> QueuedItem | None:
        return self.items[0] if self.items else None

    def pop(self) -> QueuedItem | None:
        return self.items.popleft() if self.items else None

    def compact(self) -> None:
        return None


class Flow:
    def __init__(self, fairness_id: str, *enqueued: float, request_id: str = "") -> None:
        self.fairness_id = fairness_id
        self.queue: FlowQueue = Queue([Item(t, request_id) for t in enqueued])


RESULT = SchedulingResult("default", (), {})


def make(clock: FakeClock | None = None, **params: Any) -> ProgramAwareFairness:
    handle = PluginHandle(0, clock or FakeClock(1000.0))
    plugin = REGISTRY.create("program-aware-fairness", "paf", params, handle)
    assert isinstance(plugin, ProgramAwareFairness)
    return plugin


def req(fairness_id: str = "alpha", rid: str = "r1") -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", fairness_id=fairness_id)


def done(prompt: int = 0, completion: int = 0) -> Completion:
    return Completion(Outcome.OK, 200, usage=Usage(prompt, completion, prompt + completion))


def pick(plugin: ProgramAwareFairness, *flows: Flow) -> FlowHandle | None:
    state = plugin.new_state(FcfsOrdering("fcfs"))
    for flow in flows:
        state.activate(flow)
    return state.pick()


# ---------------------------------------------------------------- factory (TestFactory_*)


def test_default_config_is_upstreams() -> None:
    p = make()
    assert p.params == ProgramAwareParams("las", 0.8, 0.2, 60.0, 3600.0, 300.0)


def test_las_config_and_empty_strategy() -> None:
    p = make(strategy="las", lasWeightService=0.7, lasWeightHeadWait=0.3, lasHalfLifeSeconds=60)
    assert (p.params.las_weight_service, p.params.las_weight_head_wait) == (0.7, 0.3)
    assert make(strategy="").params.strategy == "las"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"strategy": "wfq"}, "strategy"),
        ({"evictionTtlSeconds": -1}, "evictionTtlSeconds"),
        ({"evictionSweepSeconds": 0}, "evictionSweepSeconds"),
        ({"lasWeightService": -0.1}, "lasWeightService"),
        ({"lasWeightHeadWait": -0.1}, "lasWeightHeadWait"),
        ({"lasHalfLifeSeconds": -1}, "lasHalfLifeSeconds"),
        ({"lasDecayFactor": 0.99997}, "lasDecayFactor"),  # unknown keys fail startup
    ],
)
def test_invalid_config_is_rejected_naming_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make(**params)
    assert field in str(err.value)


# ---------------------------------------------------------------- pick (TestPick_*, TestLAS_Pick_*)


def test_pick_without_flows_or_with_empty_queues() -> None:
    p = make()
    assert pick(p) is None
    assert pick(p, Flow("p1"), Flow("p2")) is None
    assert p.programs == {}  # empty entries allocate no state (TestLAS_Pick_DoesNotCreateState...)


def test_single_flow_is_picked_and_its_enqueue_time_stashed_for_the_dispatch() -> None:
    clock = FakeClock(1000.0)
    p = make(clock)
    flow = Flow("alpha", clock.now - 0.1005, request_id="r1")  # off the ms boundary: waits truncate
    assert pick(p, flow) is flow
    clock.now += 0.05
    p.on_dispatched(req("alpha", "r1"), RESULT)
    m = p.programs["alpha"]
    assert (m.dispatched, m.in_flight, m.wait_count) == (1, 1, 1)
    assert m.avg_wait_ms == 150.0


def test_prefers_lower_attained_service() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, lasWeightService=1.0, lasWeightHeadWait=0.0, lasHalfLifeSeconds=0)
    p.on_completed(req("alpha"), RESULT, done(1000))
    p.on_completed(req("beta"), RESULT, done(10))
    a, b = Flow("alpha", clock.now), Flow("beta", clock.now)
    assert pick(p, a, b) is b
    assert pick(p, b, a) is b


def test_cold_start_uses_head_wait() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, lasWeightService=1.0, lasWeightHeadWait=1.0)
    a, b = Flow("alpha", clock.now - 0.5), Flow("beta", clock.now - 0.05)
    assert pick(p, b, a) is a


def test_idle_programs_service_decays_without_visits() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, lasWeightService=1.0, lasWeightHeadWait=0.0, lasHalfLifeSeconds=1)
    p.on_completed(req("heavy"), RESULT, done(1000))  # heavy: 1000, then idles 10 half-lives
    clock.now += 10
    p.on_completed(req("light"), RESULT, done(10))  # light: 10, just now
    heavy, light = Flow("heavy", clock.now), Flow("light", clock.now)
    assert pick(p, light, heavy) is heavy  # heavy decayed to ~1, below light's 10


def test_equal_scores_go_to_the_flow_active_first() -> None:
    clock = FakeClock(1000.0)
    p = make(clock)
    a, b = Flow("a", clock.now), Flow("b", clock.now)
    assert pick(p, a, b) is a
    assert pick(p, b, a) is b


def test_score_blends_the_weights() -> None:
    clock = FakeClock(1000.0)
    # alpha: the most service but the oldest head; beta: no service, the newest head.
    p = make(clock, lasWeightService=0.8, lasWeightHeadWait=0.2, lasHalfLifeSeconds=0)
    p.on_completed(req("alpha"), RESULT, done(100))
    a, b = Flow("alpha", clock.now - 1.0), Flow("beta", clock.now)
    assert pick(p, a, b) is b  # 0.8 * 1 beats 0.2 * 1
    p2 = make(clock, lasWeightService=0.2, lasWeightHeadWait=0.8, lasHalfLifeSeconds=0)
    p2.on_completed(req("alpha"), RESULT, done(100))
    assert pick(p2, a, b) is a


# ---------------------------------------------------------------- LAS state (TestLAS_*)


def test_completion_adds_weighted_tokens() -> None:
    p = make(lasHalfLifeSeconds=0)
    p.on_completed(req("alpha"), RESULT, done(100, 50))
    assert p.programs["alpha"].service == 200.0  # 1 * 100 + 2 * 50


def test_decay_halves_at_the_half_life_and_zero_disables_it() -> None:
    st = Program(0.0)
    st.service, st.anchor = 100.0, 99.0
    assert st.service_at(100.0, 1.0) == pytest.approx(50.0)
    flat = Program(0.0)
    flat.service, flat.anchor = 100.0, 0.0
    assert flat.service_at(3600.0, 0.0) == 100.0


def test_add_service_applies_the_pending_decay_first() -> None:
    st = Program(0.0)
    st.service, st.anchor = 100.0, 99.0
    assert st.add_service(10, 100.0, 1.0) == pytest.approx(60.0)


def test_range_normalize() -> None:
    assert range_normalize(5, 10, 10) == 0.5
    assert range_normalize(0, 0, 10) == 0.0
    assert range_normalize(10, 0, 10) == 1.0
    assert range_normalize(2.5, 0, 10) == pytest.approx(0.25)


# ------------------------------------------------------ dispatch and completion (TestPreRequest_*)


def test_dispatch_without_a_stashed_enqueue_time_counts_no_wait() -> None:
    p = make()
    p.on_dispatched(req("alpha", "fast-path"), RESULT)
    m = p.programs["alpha"]
    assert (m.dispatched, m.in_flight, m.wait_count, m.avg_wait_ms) == (1, 1, 0, 0.0)


def test_no_fairness_id_falls_back_to_the_default_flow() -> None:
    p = make()
    p.on_dispatched(req(""), RESULT)
    assert p.programs["default-flow"].dispatched == 1


def test_completion_closes_the_in_flight_count_and_stamps_the_time() -> None:
    clock = FakeClock(1000.0)
    p = make(clock)
    p.on_dispatched(req(), RESULT)
    seeded = p.programs["alpha"].last_completion
    clock.now += 1
    p.on_completed(req(), RESULT, Completion(Outcome.CLIENT_CANCEL))
    m = p.programs["alpha"]
    assert (m.in_flight, m.last_completion) == (0, seeded + 1)


def test_wait_mean_is_a_running_mean_in_whole_milliseconds() -> None:
    clock = FakeClock(1000.0)
    p = make(clock)
    for rid, wait in (("a", 0.0505), ("b", 0.1504)):
        flow = Flow("alpha", clock.now - wait, request_id=rid)
        assert pick(p, flow) is flow
        p.on_dispatched(req("alpha", rid), RESULT)
    m = p.programs["alpha"]
    assert (m.wait_count, m.avg_wait_ms) == (2, 100.0)  # (50 + 150) / 2


def test_stash_is_bounded() -> None:
    clock = FakeClock(1000.0)
    p = make(clock)
    flow = Flow("alpha", clock.now, request_id="x")
    for i in range(MAX_STASHED_WAITS + 5):
        flow.queue.peek().request_id = f"r{i}"  # type: ignore[union-attr]
        pick(p, flow)
    assert len(p._stash) == MAX_STASHED_WAITS
    assert "r0" not in p._stash and f"r{MAX_STASHED_WAITS + 4}" in p._stash


# ---------------------------------------------------------------- eviction (TestEvictIdle_*)


def test_eviction_sweep() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, evictionTtlSeconds=1, evictionSweepSeconds=5)
    p.on_dispatched(req("idle", "1"), RESULT)
    p.on_completed(req("idle", "1"), RESULT, done(10))
    p.on_dispatched(req("busy", "2"), RESULT)  # in flight: kept however old
    p.on_dispatched(req("never", "3"), RESULT)
    p.on_completed(req("never", "3"), RESULT, done())
    clock.now += 4
    p.on_dispatched(req("recent", "4"), RESULT)
    p.on_completed(req("recent", "4"), RESULT, done())
    assert set(p.programs) == {"idle", "busy", "never", "recent"}  # no sweep before 5 s
    clock.now += 1
    pick(p)
    assert set(p.programs) == {"busy", "recent"}


def test_seeded_program_that_never_completes_ages_out() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, evictionTtlSeconds=1, evictionSweepSeconds=1)
    pick(p, Flow("alpha", clock.now))
    assert "alpha" in p.programs
    clock.now += 2
    p.on_dispatched(req("beta"), RESULT)
    assert set(p.programs) == {"beta"}


def test_zero_ttl_never_evicts() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, evictionTtlSeconds=0, evictionSweepSeconds=1)
    p.on_completed(req(), RESULT, done())
    clock.now += 10**6
    pick(p)
    assert "alpha" in p.programs


def test_program_budget_drops_the_longest_idle() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, evictionTtlSeconds=0)
    p.on_dispatched(req("busy"), RESULT)
    for i in range(MAX_PROGRAMS - 1):
        clock.now += 0.001
        p.on_completed(req(f"p{i}"), RESULT, done())
    assert len(p.programs) == MAX_PROGRAMS
    p.on_completed(req("new"), RESULT, done())
    assert len(p.programs) == MAX_PROGRAMS
    assert "p0" not in p.programs and "busy" in p.programs and "new" in p.programs


# ---------------------------------------------------------------- fairness index (TestComputeFairnessIndex_*)


def waits(p: ProgramAwareFairness, clock: FakeClock, **ms: float) -> None:
    for program, wait in ms.items():
        flow = Flow(program, clock.now - (wait + 0.5) / 1000, request_id=program)
        pick(p, flow)
        p.on_dispatched(req(program, program), RESULT)


def test_fairness_index() -> None:
    clock = FakeClock(1000.0)
    assert jains_index(0, 0, 0) == 1.0
    p = make(clock)
    assert p.fairness_index() == 0.0  # the gauge before any pick
    pick(p)
    assert p.fairness_index() == 1.0  # no data
    waits(p, clock, a=100, b=100, c=100)
    pick(p)
    assert p.fairness_index() == pytest.approx(1.0)
    skewed = make(clock)
    waits(skewed, clock, a=10, b=1000)
    pick(skewed)
    assert skewed.fairness_index() < 0.9
    assert skewed.fairness_index() == pytest.approx(1010**2 / (2 * (10**2 + 1000**2)))
    single = make(clock)
    waits(single, clock, a=50)
    pick(single)
    assert single.fairness_index() == 1.0


def test_fairness_index_forgets_evicted_programs() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, evictionTtlSeconds=1, evictionSweepSeconds=1)
    waits(p, clock, a=10, b=1000)
    p.on_completed(req("a", "a"), RESULT, done())
    p.on_completed(req("b", "b"), RESULT, done())
    clock.now += 2
    pick(p)
    assert p.programs == {} and p.fairness_index() == 1.0


# ---------------------------------------------------------------- state dump and metrics


def test_dump_state_reports_aggregates_without_program_ids() -> None:
    clock = FakeClock(1000.0)
    p = make(clock)
    assert p.dump_state() == {"totalPrograms": 0, "totalInFlight": 0, "fairnessIndex": 1.0}
    waits(p, clock, **{"secret-tenant-xyz": 5, "prog-b": 20})
    state = p.dump_state()
    assert state["totalPrograms"] == 2 and state["totalInFlight"] == 2
    assert 0.0 <= state["fairnessIndex"] <= 1.0
    assert "secret-tenant-xyz" not in json.dumps(state)


def test_samples_follow_upstreams_write_points() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, lasHalfLifeSeconds=1)
    source: ProgramFairnessSource = p
    assert source.name == "paf"
    waits(p, clock, a=40)
    assert list(p.program_samples()) == [ProgramSample("a", 40.0, None)]  # dispatched, not completed
    p.on_completed(req("a", "a"), RESULT, done(10, 5))
    clock.now += 1  # decay is not folded into the reported value until the next completion
    assert list(p.program_samples()) == [ProgramSample("a", 40.0, 20.0)]
    p.on_completed(req("a", "a"), RESULT, done(0, 0))
    assert list(p.program_samples()) == [ProgramSample("a", 40.0, pytest.approx(10.0))]


def test_bind_metrics_registers_the_plugin_with_an_observer_that_exports_it() -> None:
    p = make()
    p.bind_metrics(NO_PLUGIN_METRICS)  # no program-fairness seam: nothing to do

    class Recording(type(NO_PLUGIN_METRICS)):  # type: ignore[misc]
        def __init__(self) -> None:
            self.programs: list[ProgramFairnessSource] = []

        def watch_program_fairness(self, source: ProgramFairnessSource) -> None:
            self.programs.append(source)

    metrics = Recording()
    p.bind_metrics(metrics)
    assert metrics.programs == [p]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 5000), st.booleans()), max_size=60))
def test_incremental_fairness_index_matches_a_full_recount(events: list[tuple[str, int, bool]]) -> None:
    """The index is kept from running sums; it must equal Jain's index over the current means, within
    [1/n, 1], through dispatches and evictions."""
    clock = FakeClock(1000.0)
    p = make(clock, evictionTtlSeconds=1, evictionSweepSeconds=1)
    for i, (program, wait_ms, idle) in enumerate(events):
        if idle:
            clock.now += 2  # past the TTL: the next call sweeps the programs with nothing in flight
        flow = Flow(program, clock.now - (wait_ms + 0.5) / 1000, request_id=str(i))
        pick(p, flow)
        p.on_dispatched(req(program, str(i)), RESULT)
        p.on_completed(req(program, str(i)), RESULT, done(1, 1))
        pick(p)
        means = [m.avg_wait_ms for m in p.programs.values() if m.wait_count]
        total, squares = sum(means), sum(x * x for x in means)
        assert p.fairness_index() == pytest.approx(jains_index(total, squares, len(means)), abs=1e-9)
        if len(means) > 1 and squares:
            assert 1 / len(means) - 1e-9 <= p.fairness_index() <= 1 + 1e-9
