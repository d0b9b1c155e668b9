"""``fair-share-fairness-policy`` in the flow controller: the real queues and controller, a counting
detector (in flight / slots) and a fake clock. A lone flow gets the whole pool; with a second active
flow the dominant one stops at its ceiling; the light flow goes the moment it arrives; nobody starves;
the configuration loads (and is refused with clear errors) through the real config loader."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epp.config.sections import load_picker_config
from epp.flowcontrol.config import parse_flow_control, resolve_flow_control
from epp.flowcontrol.controller import FlowController
from epp.server.server import plugin_states
from scheduler.errors import ConfigError
from scheduler.plugins.flowcontrol.fair_share import FairShareFairness, FairShareParams
from scheduler.plugins.flowcontrol.ordering import FcfsOrdering
from scheduler.types import Completion, LLMRequest, Outcome, SchedulingResult
from tests.epp.flowcontrol.fc_fakes import Detector, request

RESULT = SchedulingResult("default", (), {})
DONE = Completion(Outcome.OK, 200)
SLOTS = 8


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Pool:
    """A controller over a fair-share band 0, and the requests it dispatched, per tenant."""

    def __init__(self, reserve: float = 0.25, window: float = 1.0, slots: int = SLOTS) -> None:
        self.clock = Clock()
        self.policy = FairShareFairness("fs", FairShareParams(reserve, window), self.clock)
        section = parse_flow_control({"defaultPriorityBand": {"fairnessPolicyRef": "fs"}})
        plugins = {"fs": self.policy, "fcfs": FcfsOrdering("fcfs")}
        config = resolve_flow_control(section, "llm-d.ai/v1alpha1", plugins.__getitem__, ("fs",))
        self.detector = Detector(limit=slots)
        self.flow = FlowController(config, self.detector, lambda: [object()], self.clock, poll_interval=0.001)  # type: ignore[list-item]
        self.running: list[LLMRequest] = []
        self.sent: dict[str, int] = {}
        self.seq = 0
        self.checks: list[str] = []

    def in_flight(self, tenant: str) -> int:
        return sum(1 for r in self.running if r.fairness_id == tenant)

    def _dispatch(self, r: LLMRequest) -> None:
        self.detector.inflight += 1
        self.running.append(r)
        self.sent[r.fairness_id] = self.sent.get(r.fairness_id, 0) + 1
        self.policy.on_dispatched(r, RESULT)

    def offer(self, tenant: str) -> None:
        self.seq += 1
        r = request(f"{tenant}{self.seq}", fairness=tenant)
        if self.flow.offer(r, lambda: self._dispatch(r)) is None:
            self._dispatch(r)

    def complete(self, r: LLMRequest) -> None:
        self.running.remove(r)
        self.detector.inflight -= 1
        self.policy.on_completed(r, RESULT, DONE)
        self.flow.kick()

    async def settle(self) -> None:
        for _ in range(4):
            await asyncio.sleep(0)


async def test_a_lone_flow_gets_the_whole_pool() -> None:
    pool = Pool(reserve=0.5)
    for _ in range(3 * SLOTS):
        pool.offer("a")
    await pool.settle()
    assert pool.in_flight("a") == SLOTS and len(pool.flow.queues) == 2 * SLOTS
    pool.complete(pool.running[0])
    await pool.settle()
    assert pool.in_flight("a") == SLOTS  # the freed slot goes straight back to the lone flow
    pool.flow.close()


async def test_the_light_flow_is_dispatched_on_arrival_and_the_dominant_one_stops_at_its_ceiling() -> None:
    pool = Pool(reserve=0.25)
    pool.offer("b")  # b is active (in flight) before a floods
    for _ in range(5 * SLOTS):
        pool.offer("a")
    await pool.settle()
    assert pool.in_flight("a") == 6  # 8 slots, reserve 0.25: a stops at 6, one slot stays free
    pool.complete(next(r for r in pool.running if r.fairness_id == "b"))
    await pool.settle()
    assert pool.in_flight("a") == 6  # b's slot is not taken (b completed just now: still active)
    pool.offer("b")
    pool.offer("b")
    await pool.settle()  # no completion needed: both of b's requests go at once
    assert pool.in_flight("b") == 2 and pool.in_flight("a") == 6
    for r in [r for r in pool.running if r.fairness_id == "a"][:3]:
        pool.complete(r)
    await pool.settle()
    assert pool.in_flight("a") == 6  # refilled up to its ceiling, not past it
    pool.flow.close()


async def test_the_reserve_is_released_after_the_activity_window() -> None:
    pool = Pool(reserve=0.25, window=1.0)
    pool.offer("b")
    for _ in range(3 * SLOTS):
        pool.offer("a")
    await pool.settle()
    pool.complete(next(r for r in pool.running if r.fairness_id == "b"))
    await pool.settle()
    assert pool.in_flight("a") == 6
    pool.clock.t += 1.5
    await asyncio.sleep(0.005)  # the controller's poll runs a pass: b is no longer active
    await pool.settle()
    assert pool.in_flight("a") == SLOTS
    pool.flow.close()


async def test_the_fast_path_holds_a_dominant_flow_back_too() -> None:
    pool = Pool(reserve=0.25)
    pool.offer("b")
    for _ in range(6):
        pool.offer("a")  # nothing queued, room left: the fast path
    assert pool.in_flight("a") == 6 and not len(pool.flow.queues)
    pool.offer("a")  # a holds 6 of 8 slots, over its share (6 of 7): queued
    assert pool.in_flight("a") == 6 and len(pool.flow.queues) == 1
    pool.offer("b")  # b is under its share: the fast path is not taken (something waits); goes at once
    await pool.settle()
    assert pool.in_flight("b") == 2
    pool.flow.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "a", "a", "b", "done", "tick"]), min_size=1, max_size=120),
    st.sampled_from([0.125, 0.25, 0.375]),
    st.integers(0, 2**16),
)
def test_properties_ceiling_immediacy_and_no_starvation(events: list[str], reserve: float, seed: int) -> None:
    """Random arrivals of a dominant tenant (a) and a light one (b), completions and clock ticks:

    * a tenant is dispatched at its ceiling (holding ``1 - reserve`` of the slots) only within its
      share (at most half of the requests in flight) or while the other tenant is inactive (nothing
      waiting or in flight, no arrival, dispatch or completion within the window);
    * a tenant waits while a slot is free only when it holds more than its share and its ceiling's
      worth of slots (so the light tenant, under its share, never waits for a free slot);
    * nothing starves: the pool is never idle while requests wait, and completing everything
      dispatches every queued request."""
    rnd = random.Random(seed)

    async def run() -> None:
        pool = Pool(reserve=reserve, window=1.0)
        last = {"a": -1e9, "b": -1e9}
        original = pool._dispatch

        def active(tenant: str) -> bool:
            waiting = any(i.fairness_id == tenant for i in pool.flow.queues.items())
            return waiting or pool.in_flight(tenant) > 0 or pool.clock.t - last[tenant] <= 1.0

        def checked(r: LLMRequest) -> None:
            tenant = r.fairness_id
            other = "b" if tenant == "a" else "a"
            usage = pool.in_flight(tenant) / SLOTS
            within_share = pool.in_flight(tenant) * 2 <= len(pool.running)
            if active(other) and not (usage + reserve < 1 - 1e-9 or within_share):
                pool.checks.append(f"{tenant} dispatched holding {pool.in_flight(tenant)} of {SLOTS}")
            last[tenant] = pool.clock.t
            original(r)

        pool._dispatch = checked  # type: ignore[method-assign]
        for event in events:
            if event == "done" and pool.running:
                r = pool.running[rnd.randrange(len(pool.running))]
                last[r.fairness_id] = pool.clock.t
                pool.complete(r)
            elif event == "tick":
                pool.clock.t += 0.4
                pool.flow.kick()
            elif event in ("a", "b"):
                last[event] = pool.clock.t
                pool.offer(event)
            await pool.settle()
            free = SLOTS - pool.detector.inflight
            for tenant in ("a", "b"):
                if free and any(i.fairness_id == tenant for i in pool.flow.queues.items()):
                    other = "b" if tenant == "a" else "a"
                    over = pool.in_flight(tenant) * 2 > len(pool.running) and active(other)
                    at_ceiling = pool.in_flight(tenant) / SLOTS + reserve >= 1 - 1e-9
                    assert over and at_ceiling, f"{tenant} waits with {free} free"
            if pool.flow.queues.count:
                assert pool.detector.inflight > 0, "requests wait on an idle pool"
        assert not pool.checks, pool.checks
        for _ in range(1000):  # drain: every queued request is eventually dispatched
            if not pool.running:
                break
            pool.complete(pool.running[0])
            await pool.settle()
        assert not pool.flow.queues.count and not pool.running
        pool.flow.close()

    asyncio.run(run())


async def test_both_flows_flooding_split_the_pool_evenly() -> None:
    """Two dominant flows: neither is over its share for long, the whole pool stays in use, and the
    dispatches alternate (round-robin), so neither starves."""
    pool = Pool(reserve=0.25)
    for _ in range(4 * SLOTS):
        pool.offer("a")
        pool.offer("b")
    await pool.settle()
    for _ in range(40):
        pool.complete(pool.running[0])
        await pool.settle()
        assert pool.detector.inflight == SLOTS
    assert abs(pool.sent["a"] - pool.sent["b"]) <= 2
    pool.flow.close()


# ---------------------------------------------------------------- configuration


CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: max-score-picker
- type: queue-scorer
- type: fair-share-fairness-policy
  name: share
  parameters: {parameters}
flowControl:
  defaultPriorityBand: {{fairnessPolicyRef: share}}
"""


def test_the_policy_loads_as_a_band_fairness_policy_and_gets_the_request_hooks() -> None:
    loaded = load_picker_config(None, CONFIG.format(parameters="{reserve: 0.25, activeWindowSeconds: 0.5}"))
    assert loaded.flow_control is not None
    fairness = loaded.flow_control.band(0).fairness
    assert isinstance(fairness, FairShareFairness)
    assert fairness.params == FairShareParams(0.25, 0.5)
    assert fairness is loaded.config.plugin("share")  # one instance: policy and hooks
    scheduler = loaded.config.build_scheduler()
    r = LLMRequest(request_id="r", model="m", target_model="m", fairness_id="t")
    scheduler.dispatched(r, RESULT)
    assert fairness.in_flight(0, "t") == 1
    assert plugin_states([fairness])["share"] == {
        "trackedFlows": 1,
        "activeFlowsByBand": {"0": 1},
        "inFlightByBand": {"0": 1},
    }
    scheduler.completed(r, RESULT, DONE)
    assert fairness.in_flight(0, "t") == 0


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ("{reserve: 1}", "parameters.reserve"),
        ("{activeWindowSeconds: -2}", "parameters.activeWindowSeconds"),
        ("{reserv: 0.2}", "reserv"),
    ],
)
def test_bad_parameters_are_config_errors(parameters: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_picker_config(None, CONFIG.format(parameters=parameters), source="fc.yaml")
    assert message in str(err.value) and "fc.yaml" in str(err.value)
