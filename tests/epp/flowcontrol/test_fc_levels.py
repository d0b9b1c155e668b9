"""Provisioned priority levels: what the usage-limit policy ranks, and how the controller applies it."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from epp.admission.objectives import InferenceObjective, InMemoryObjectiveStore
from epp.flowcontrol.controller import FlowController, Ticket
from epp.flowcontrol.levels import GC_AFTER_S, MAX_DYNAMIC_LEVELS, SWEEP_INTERVAL_S, PriorityLevels
from scheduler.plugins.flowcontrol.usage_limit import PriorityHoldback, PriorityHoldbackParams
from tests.epp.flowcontrol.fc_fakes import POLICIES, Detector, fc_config, request

NOTHING_QUEUED = lambda p: False  # noqa: E731


def test_static_levels_are_zero_and_the_configured_bands() -> None:
    levels = PriorityLevels({5: None, -3: None})
    assert levels.current(0.0, NOTHING_QUEUED)[0] == (5, 0, -3)


def test_objective_priorities_follow_the_store() -> None:
    store = InMemoryObjectiveStore([InferenceObjective("critical", 10), InferenceObjective("shed", -1)])
    levels = PriorityLevels((), store.priorities)
    ranked, index = levels.current(0.0, NOTHING_QUEUED)
    assert ranked == (10, 0, -1) and index == {10: 0, 0: 1, -1: 2}
    store.upsert(InferenceObjective("batch", -5))
    assert levels.current(1.0, NOTHING_QUEUED)[0] == (10, 0, -1, -5)
    store.delete("critical")
    assert levels.current(2.0, NOTHING_QUEUED)[0] == (0, -1, -5)


def test_a_seen_priority_stays_until_idle_for_the_gc_timeout() -> None:
    levels = PriorityLevels(())
    levels.seen(7, 0.0)
    assert levels.current(0.0, NOTHING_QUEUED)[0] == (7, 0)
    assert levels.current(GC_AFTER_S - 1, NOTHING_QUEUED)[0] == (7, 0)
    # idle past the timeout, but its band still holds requests: kept
    assert levels.current(GC_AFTER_S + SWEEP_INTERVAL_S, lambda p: p == 7)[0] == (7, 0)
    assert levels.current(GC_AFTER_S + 3 * SWEEP_INTERVAL_S, NOTHING_QUEUED)[0] == (0,)


def test_dynamic_levels_are_bounded() -> None:
    levels = PriorityLevels(())
    for p in range(1, MAX_DYNAMIC_LEVELS + 10):
        levels.seen(p, float(p))
    ranked, _ = levels.current(0.0, NOTHING_QUEUED)
    assert len(ranked) == MAX_DYNAMIC_LEVELS + 1  # + priority 0
    assert 1 not in ranked and MAX_DYNAMIC_LEVELS + 9 in ranked  # the least recently seen went first


def holdback_controller(detector: Detector, objectives: InMemoryObjectiveStore) -> FlowController:
    POLICIES["holdback"] = PriorityHoldback("holdback", PriorityHoldbackParams(0.5))
    config = fc_config({"usageLimitPolicyPluginRef": "holdback"})
    return FlowController(config, detector, lambda: [object()], lambda: 0.0,  # type: ignore[list-item]
                          objective_priorities=objectives.priorities, poll_interval=0.001)  # fmt: skip


async def test_holdback_keeps_the_lowest_band_at_its_ceiling_while_no_higher_request_waits() -> None:
    """Upstream ranks every provisioned level: with objectives 10 and -1, a sheddable request at
    saturation 0.5 waits even though nothing else is queued; a critical one goes at once."""
    detector = Detector(level=0.5)
    store = InMemoryObjectiveStore([InferenceObjective("critical", 10), InferenceObjective("shed", -1)])
    flow = holdback_controller(detector, store)
    assert flow.offer(request("c0", priority=10), lambda: None) is None  # fast path
    ticket = flow.offer(request("s", priority=-1), lambda: None)
    assert isinstance(ticket, Ticket)  # 0.5 >= the lowest band's ceiling (0.5): it waits
    dispatched: list[str] = []
    assert flow.offer(request("c", priority=10), lambda: dispatched.append("c")) is not None
    await asyncio.sleep(0.005)  # the pass dispatches the critical one past the waiting sheddable one
    assert dispatched == ["c"] and flow.queues.holds(-1) and not flow.queues.holds(10)
    detector.level = 0.4
    await asyncio.sleep(0.005)
    assert not flow.queues.count


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([10, 0, -1]), st.integers(0, 8)), min_size=1, max_size=30),
    st.integers(1, 8),
)
def test_no_band_is_dispatched_past_its_ceiling(arrivals: list[tuple[int, int]], slots: int) -> None:
    """Property, fake clock and a counting detector (in flight / slots): whenever a request of band p is
    dispatched, the saturation before it was below p's ceiling among all provisioned levels (10, 0, -1),
    a higher band is never passed over while it waits, and nothing waits while its band has room."""
    store = InMemoryObjectiveStore([InferenceObjective("critical", 10), InferenceObjective("shed", -1)])
    ceilings = {10: 1.0, 0: 0.75, -1: 0.5}

    async def run() -> None:
        detector = Detector(limit=slots)
        flow = holdback_controller(detector, store)

        def dispatch(priority: int) -> None:
            assert detector.saturation([], 0.0) < ceilings[priority]
            assert not any(flow.queues.holds(p) for p in ceilings if p > priority)
            detector.inflight += 1

        for i, (priority, completions) in enumerate(arrivals):
            detector.inflight = max(0, detector.inflight - completions)
            ticket = flow.offer(request(f"r{i}", priority=priority), lambda p=priority: dispatch(p))
            if ticket is None:
                dispatch(priority)
            flow.kick()
            for _ in range(3):
                await asyncio.sleep(0)
            saturation = detector.saturation([], 0.0)
            assert not any(flow.queues.holds(p) and saturation < c for p, c in ceilings.items())
        flow.close()

    asyncio.run(run())
