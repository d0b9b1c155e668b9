"""CapacityPlanner: after every call each endpoint the index holds has the planner's capacity, so the
per-dispatch admit of a held endpoint without a new own capacity can return at once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.plugins.prefix.capacity import CapacityPlanner
from scheduler.plugins.prefix.index import PrefixIndex

ADDRS = ("a:1", "b:1", "c:1", "d:1")

steps = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit_own", "removed", "clear"]),
        st.sampled_from(ADDRS),
        st.integers(min_value=1, max_value=400),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_every_held_endpoint_has_the_planned_capacity(ops: list[tuple[str, str, int]]) -> None:
    index = PrefixIndex(100)
    planner = CapacityPlanner(index, default_capacity=100, max_own=300, total_entries=500, floor=8)
    for op, address, own in ops:
        if op == "admit":
            planner.admit(address)
            index.insert(address, [hash((address, own))])
        elif op == "admit_own":
            planner.admit(address, own)
            index.insert(address, [hash((address, own))])
        elif op == "removed":
            index.remove([address])
            planner.removed([address])
        else:
            index.clear()  # autotuning a new block size
        held = index.addresses()
        for a in held:
            assert index.capacity(a) == planner.capacity(a, len(held)), (op, a)
            assert index.entries(a) <= index.capacity(a)
