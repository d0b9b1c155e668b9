"""The flow-control queues and policies as properties (hypothesis), sans I/O, under a fake clock."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from epp.flowcontrol.queues import FlowQueues, Item
from tests.epp.flowcontrol.fc_fakes import fc_config

FLOWS = st.sampled_from(["a", "b", "c", "d"])
PRIORITIES = st.sampled_from([-5, 0, 3, 10])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), PRIORITIES, FLOWS), st.tuples(st.just("pop"), st.just(0), st.just(""))
    ),
    max_size=120,
)


def _open(_: int) -> bool:
    return True


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_strict_priority_between_bands(ops: list[tuple[str, int, str]]) -> None:
    """Every pop takes a request of the highest priority queued; counts stay consistent."""
    q = FlowQueues(fc_config())
    queued: list[Item] = []
    for t, (op, priority, flow) in enumerate(ops):
        if op == "push":
            queued.append(q.push(priority, flow, 1, float(t), math.inf, None))
        else:
            item = q.pop_next(_open)
            if not queued:
                assert item is None
                continue
            assert item is not None and item.priority == max(i.priority for i in queued)
            queued.remove(item)
        assert len(q) == len(queued) and q.bytes == len(queued)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(FLOWS, st.integers(1, 12), min_size=1), st.sampled_from(["rr", "strict"]), st.data())
def test_fairness_policies(counts: dict[str, int], policy: str, data: st.DataObject) -> None:
    """round-robin: while two flows both still wait, their dispatch counts differ by at most one.
    global-strict (FCFS): the band behaves as one queue in arrival order. Both: FCFS inside a flow."""
    q = FlowQueues(
        fc_config({"defaultPriorityBand": {"fairnessPolicyRef": policy, "orderingPolicyRef": "fcfs"}})
    )
    arrivals = data.draw(st.permutations([f for f, n in counts.items() for _ in range(n)]))
    pushed = [q.push(0, f, 1, float(t), math.inf, None) for t, f in enumerate(arrivals)]
    popped: list[Item] = []
    served = dict.fromkeys(counts, 0)
    left = dict(counts)
    while (item := q.pop_next(_open)) is not None:
        popped.append(item)
        served[item.fairness_id] += 1
        left[item.fairness_id] -= 1
        if policy == "rr":
            waiting = [f for f in counts if left[f] > 0]
            for f in waiting:
                for g in counts:
                    assert served[g] <= served[f] + 1, (served, left)
    assert len(popped) == len(pushed)
    for f in counts:
        seqs = [i.seq for i in popped if i.fairness_id == f]
        assert seqs == sorted(seqs)
    if policy == "strict":
        assert [i.seq for i in popped] == [i.seq for i in pushed]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("push"), FLOWS), st.tuples(st.just("pop"), st.just(""))),
                max_size=120))  # fmt: skip
def test_round_robin_cursor_is_upstreams(ops: list[tuple[str, str]]) -> None:
    """round-robin against a model of llm-d-router's: each pop serves the first waiting flow after the
    last served one in sorted fairness-id order (cyclic), from the first when the band was empty; a flow
    that refills is served when the cursor reaches it, so a flow returning after another's burst goes
    next."""
    q = FlowQueues(fc_config({"defaultPriorityBand": {"fairnessPolicyRef": "rr"}}))
    waiting: dict[str, int] = {}
    last: str | None = None
    for t, (op, flow) in enumerate(ops):
        if op == "push":
            q.push(0, flow, 1, float(t), math.inf, None)
            waiting[flow] = waiting.get(flow, 0) + 1
            continue
        item = q.pop_next(_open)
        keys = sorted(f for f, n in waiting.items() if n)
        if not keys:
            assert item is None
            last = None
            continue
        expected = next((k for k in keys if last is None or k > last), keys[0])
        assert item is not None and item.fairness_id == expected
        waiting[expected] -= 1
        # upstream's next dispatch cycle (every 1 ms) picks from the empty band and resets the cursor
        last = expected if any(waiting.values()) else None


def test_round_robin_returning_flow_goes_next() -> None:
    """A's burst holds the band; B arrives: B is served at the next dispatch, not after one more of A."""
    q = FlowQueues(fc_config({"defaultPriorityBand": {"fairnessPolicyRef": "rr"}}))
    for t in range(5):
        q.push(0, "tenant-a", 1, float(t), math.inf, None)
    first = q.pop_next(_open)
    assert first is not None and first.fairness_id == "tenant-a"
    q.push(0, "tenant-b", 1, 10.0, math.inf, None)
    nxt = q.pop_next(_open)
    assert nxt is not None and nxt.fairness_id == "tenant-b"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=1, max_size=40))
def test_edf_orders_by_deadline_then_arrival(deadlines: list[float]) -> None:
    q = FlowQueues(fc_config({"defaultPriorityBand": {"orderingPolicyRef": "edf"}}))
    for t, d in enumerate(deadlines):
        q.push(0, "a", 1, float(t), d, None)
    out = []
    while (item := q.pop_next(_open)) is not None:
        out.append((item.deadline, item.seq))
    assert out == sorted(out)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), FLOWS, st.booleans()), max_size=60), st.floats(0.1, 3))
def test_expiry_under_a_fake_clock(arrivals: list[tuple[float, str, bool]], ttl: float) -> None:
    """Items older than the TTL expire in arrival order; removed (cancelled) items never expire."""
    q = FlowQueues(fc_config())
    now = 0.0
    items = []
    for gap, flow, cancel in arrivals:
        now += gap
        item = q.push(0, flow, 1, now, math.inf, None)
        items.append(item)
        if cancel:
            assert q.remove(item) and not q.remove(item)
    expired = q.expired(now, ttl, since=-math.inf)
    expected = [i for i in items if not i.removed or i in expired]
    expected = [i for i in expected if i.enqueued_at <= now - ttl]
    assert expired == expected
    assert len(q) == sum(1 for i in items if not i.removed)
    assert all(i.enqueued_at > now - ttl for i in q.items())
    assert q.expired(now, 0.0, since=-math.inf) == []  # TTL 0: no expiry


def test_a_regime_change_starts_a_fresh_budget() -> None:
    q = FlowQueues(fc_config())
    q.push(0, "a", 1, 0.0, math.inf, None)
    assert q.expired(10.0, 5.0, since=8.0) == []  # 2s since the change
    assert len(q.expired(13.0, 5.0, since=8.0)) == 1


def test_capacity_limits_per_band_and_pool() -> None:
    q = FlowQueues(fc_config({"maxBytes": "100", "priorityBands": [{"priority": 1, "maxRequests": 2}]}))
    assert q.rejection(1, 10) is None
    q.push(1, "a", 10, 0.0, math.inf, None)
    q.push(1, "a", 10, 0.0, math.inf, None)
    assert q.rejection(1, 10) == "priority band 1 is full (maxRequests 2)"
    assert q.rejection(0, 80) is None
    assert q.rejection(0, 81) == "the pool's queue is full (maxBytes 100)"
    q2 = FlowQueues(fc_config({"defaultPriorityBand": {"maxBytes": "50"}}))
    assert q2.rejection(7, 51) == "priority band 7 is full (maxBytes 50)"


def test_removed_items_are_compacted() -> None:
    """Cancelled items do not pile up in a flow that is never drained (memory stays bounded)."""
    q = FlowQueues(fc_config())
    q.push(0, "a", 1, 0.0, math.inf, None)  # a long-waiting head keeps the flow alive
    for t in range(1000):
        q.remove(q.push(0, "a", 1, float(t), math.inf, None))
    flow = next(q.bands()).flows["a"]
    assert flow.count == 1 and flow.dead <= 64 + 1
    assert len(q._arrivals) <= 64 + 2
