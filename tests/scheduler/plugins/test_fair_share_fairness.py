"""``fair-share-fairness-policy`` (ours): parameters, the over-share rule, the round-robin among
admitted flows, the activity window and the record budget, under a fake clock."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from plugin_builders import FakeClock

from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins import register_builtin
from scheduler.plugins.flowcontrol import fair_share
from scheduler.plugins.flowcontrol.fair_share import FairShareFairness, FairShareParams
from scheduler.plugins.flowcontrol.interfaces import FlowQueue, QueuedItem, ShareLimitedFairness
from scheduler.plugins.flowcontrol.ordering import FcfsOrdering
from scheduler.registry import Registry
from scheduler.types import Completion, LLMRequest, Outcome, SchedulingResult

REGISTRY = Registry()
register_builtin(REGISTRY)
RESULT = SchedulingResult("default", (), {})
DONE = Completion(Outcome.OK, 200)


class Queue:
    def __init__(self) -> None:
        self.items: deque[QueuedItem] = deque()

    def push(self, item: QueuedItem) -> None:
        self.items.append(item)

    def peek(self) -> QueuedItem | None:
        return self.items[0] if self.items else None

    def pop(self) -> QueuedItem | None:
        return self.items.popleft() if self.items else None

    def compact(self) -> None:
        return None


class Flow:
    def __init__(self, fairness_id: str) -> None:
        self.fairness_id = fairness_id
        self.queue: FlowQueue = Queue()


def make(clock: FakeClock | None = None, **params: Any) -> FairShareFairness:
    plugin = REGISTRY.create(
        "fair-share-fairness-policy", "fs", params, PluginHandle(0, clock or FakeClock(1000.0))
    )
    assert isinstance(plugin, FairShareFairness)
    return plugin


def req(fairness_id: str, priority: int = 0, rid: str = "r") -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", fairness_id=fairness_id, priority=priority)


def dispatch(plugin: FairShareFairness, fairness_id: str, n: int = 1, priority: int = 0) -> None:
    for _ in range(n):
        plugin.on_dispatched(req(fairness_id, priority), RESULT)


def complete(plugin: FairShareFairness, fairness_id: str, n: int = 1, priority: int = 0) -> None:
    for _ in range(n):
        plugin.on_completed(req(fairness_id, priority), RESULT, DONE)


# ---------------------------------------------------------------- parameters


def test_defaults_and_contract() -> None:
    p = make()
    assert p.params == FairShareParams(reserve=0.1, active_window_seconds=1.0)
    assert isinstance(p, ShareLimitedFairness)
    assert make(reserve=0.25, activeWindowSeconds=0).params == FairShareParams(0.25, 0.0)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"reserve": 1.0}, "parameters.reserve"),
        ({"reserve": -0.1}, "parameters.reserve"),
        ({"reserve": "a lot"}, "parameters.reserve"),
        ({"activeWindowSeconds": -1}, "parameters.activeWindowSeconds"),
        ({"window": 1}, "window"),  # unknown keys are rejected
    ],
)
def test_invalid_parameters_are_config_errors_naming_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make(**params)
    assert field in str(err.value) and "fair-share-fairness-policy" in str(err.value)


# ---------------------------------------------------------------- the over-share rule


def test_a_lone_flow_is_never_over_its_share() -> None:
    p = make(reserve=0.5)
    dispatch(p, "a", 8)
    assert not p.over_share(0, "a")
    assert p.admits(0, "a", saturation=0.99, ceiling=1.0)  # even with almost no room left


def test_the_dominant_flow_is_held_at_the_reserve_the_light_one_is_not() -> None:
    p = make(reserve=0.25)
    dispatch(p, "a", 6)
    dispatch(p, "b", 1)
    assert p.over_share(0, "a") and not p.over_share(0, "b")
    # 7 of 8 slots in flight: a's usage is 6/8, plus the reserve reaches the ceiling: held
    assert not p.admits(0, "a", saturation=7 / 8, ceiling=1.0)
    assert p.admits(0, "a", saturation=7 / 10, ceiling=1.0)  # a bigger pool (10 slots): 0.6 + 0.25 < 1
    assert not p.admits(0, "a", saturation=7 / 10, ceiling=0.8)  # the band's ceiling counts
    assert p.admits(0, "b", saturation=7 / 8, ceiling=1.0)  # the light flow takes the reserve


def test_equal_flows_share_the_whole_pool() -> None:
    p = make(reserve=0.5)
    dispatch(p, "a", 4)
    dispatch(p, "b", 4)
    assert not p.over_share(0, "a") and not p.over_share(0, "b")
    assert p.admits(0, "a", saturation=7 / 8, ceiling=1.0)


def test_flows_of_other_bands_do_not_compete() -> None:
    p = make(reserve=0.5)
    dispatch(p, "a", 6, priority=0)
    dispatch(p, "b", 6, priority=10)
    assert not p.over_share(0, "a") and not p.over_share(10, "b")


def test_activity_window_decays_and_an_idle_flow_stops_holding_the_others_back() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, reserve=0.25, activeWindowSeconds=2.0)
    dispatch(p, "a", 6)
    dispatch(p, "b")
    complete(p, "b")  # b is idle but was active a moment ago
    assert not p.admits(0, "a", saturation=6 / 8, ceiling=1.0)
    clock.now += 1.5
    assert not p.admits(0, "a", saturation=6 / 8, ceiling=1.0)
    clock.now += 1.0  # 2.5 s after b's last completion: b no longer counts
    assert p.admits(0, "a", saturation=6 / 8, ceiling=1.0)
    assert p.tracked() == 1


def test_a_waiting_flow_stays_active_past_the_window() -> None:
    clock = FakeClock(1000.0)
    p = make(clock, reserve=0.25, activeWindowSeconds=1.0)
    state = p.new_band_state(FcfsOrdering("fcfs"), 0)
    b = Flow("b")
    state.activate(b)
    dispatch(p, "a", 6)
    clock.now += 60
    assert not p.admitted(0, "a", 6 / 8, 1.0)  # b still waits
    state.deactivate(b)
    clock.now += 1.5
    assert p.admitted(0, "a", 6 / 8, 1.0)


# ---------------------------------------------------------------- picking


def test_pick_skips_held_flows_and_takes_turns_among_the_others() -> None:
    p = make(reserve=0.25)
    state = p.new_band_state(FcfsOrdering("fcfs"), 0)
    a, b, c = Flow("a"), Flow("b"), Flow("c")
    for f in (a, b, c):
        state.activate(f)
    dispatch(p, "a", 6)
    # a holds 6 of 6 with k=3 active flows: over its share; at 6 of 8 slots only b and c go, in turns
    picks = [state.pick_within(6 / 8, 1.0) for _ in range(4)]
    assert [f.fairness_id for f in picks if f is not None] == ["b", "c", "b", "c"]
    picks = [state.pick_within(6 / 12, 1.0) for _ in range(3)]  # 12 slots: a is below its ceiling
    assert [f.fairness_id for f in picks if f is not None] == ["a", "b", "c"]
    state.deactivate(b)
    state.deactivate(c)
    assert state.pick_within(6 / 8, 1.0) is None  # only a waits, and b and c are still active: held
    assert state.pick() is a  # no capacity information: plain round-robin


def test_records_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fair_share, "MAX_FLOWS", 5)
    clock = FakeClock(1000.0)
    p = make(clock, activeWindowSeconds=100.0)
    for i in range(50):
        dispatch(p, f"t{i}")
        assert p.tracked() <= 5
    complete(p, "t49")
    assert p.in_flight(0, "t49") == 0
    complete(p, "t0")  # forgotten with its in-flight count: a late completion is a no-op
    assert p.in_flight(0, "t0") == 0
    state = p.dump_state()
    assert state["trackedFlows"] == 5 and state["inFlightByBand"] == {"0": 4}
    clock.now += 1000  # everything idle past the window: the next call sweeps all but the caller
    complete(p, "t48")
    assert p.tracked() == 4  # t45, t46, t47 still have a request in flight; t48 just completed
