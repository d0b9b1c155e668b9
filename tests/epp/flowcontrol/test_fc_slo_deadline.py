"""``slo-deadline-ordering-policy``: upstream's tables (llm-d-router
``pkg/epp/framework/plugins/flowcontrol/ordering/slodeadline/slo_deadline_test.go``) and its order through
the real queues and controller, under a fake clock."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epp.config.sections import load_picker_config
from epp.flowcontrol.config import parse_flow_control, resolve_flow_control
from epp.flowcontrol.controller import FlowController
from epp.flowcontrol.queues import FlowQueues, Item
from scheduler.errors import ConfigError
from scheduler.plugins.flowcontrol.ordering import SloDeadlineOrdering, slo_deadline
from scheduler.types import LLMRequest
from tests.epp.flowcontrol.fc_fakes import Detector

NOW = 1000.0
MAX_INT64 = str(2**63 - 1)
POLICY = SloDeadlineOrdering("slo-deadline-ordering-policy")


def item(received: float, slo: str | None, seq: int, header: str = "x-llm-d-slo-ttft-ms") -> Item:
    headers = {} if slo is None else {header: slo}
    return Item(seq, 0, "f", 1, received, math.inf, None, str(seq), headers)


def less(a: Item, b: Item) -> bool:
    return POLICY.key(a) < POLICY.key(b)


A = item(NOW, "100", 1)
B = item(NOW, "50", 2)
C = item(NOW + 0.020, "50", 3)
D = item(NOW, None, 4)
E = item(NOW - 1.0, "1050", 0)  # same deadline as B, received earlier (arrived first)
F = item(NOW, MAX_INT64, 5)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (B, A, True),  # earlier SLO deadline first
        (A, B, False),
        (C, A, True),  # received later but earlier deadline
        (A, D, True),  # SLO-bound before no header
        (D, A, False),
        (E, B, True),  # same deadline: earlier arrival first
        (B, E, False),
        (A, F, True),  # SLO-bound before an overflowing TTFT
        (F, A, False),
    ],
)
def test_less(a: Item, b: Item, expected: bool) -> None:
    assert less(a, b) is expected


@pytest.mark.parametrize(
    ("headers", "deadline"),
    [
        ({"x-llm-d-slo-ttft-ms": "200"}, NOW + 0.2),
        ({"x-slo-ttft-ms": "150"}, NOW + 0.15),  # the deprecated alias
        ({"x-llm-d-slo-ttft-ms": "200", "x-slo-ttft-ms": "50"}, NOW + 0.2),  # the current name wins
        ({"x-llm-d-slo-ttft-ms": " 25 "}, NOW + 0.025),  # trimmed
        ({"x-llm-d-slo-ttft-ms": "+5"}, NOW + 0.005),  # Go's ParseInt takes a sign
        ({}, math.inf),
        ({"x-some-header": "200"}, math.inf),
        ({"x-llm-d-slo-ttft-ms": ""}, math.inf),
        ({"x-llm-d-slo-ttft-ms": "x"}, math.inf),
        ({"x-llm-d-slo-ttft-ms": "1.5"}, math.inf),
        ({"x-llm-d-slo-ttft-ms": "1_000"}, math.inf),
        ({"x-llm-d-slo-ttft-ms": "-1"}, math.inf),
        ({"x-llm-d-slo-ttft-ms": MAX_INT64}, math.inf),  # overflows a time.Duration
        ({"x-llm-d-slo-ttft-ms": str((2**63 - 1) // 1_000_000)}, NOW + ((2**63 - 1) // 1_000_000) / 1000),
    ],
)
def test_slo_deadline(headers: dict[str, str], deadline: float) -> None:
    assert slo_deadline(Item(1, 0, "f", 1, NOW, math.inf, None, "r", headers)) == deadline


def test_takes_no_parameters_and_loads_as_an_ordering_policy() -> None:
    head = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n"
    plugins = (
        "plugins:\n- type: max-score-picker\n- type: queue-scorer\n- type: slo-deadline-ordering-policy\n"
    )
    section = (
        "flowControl: {priorityBands: [{priority: 5, orderingPolicyRef: slo-deadline-ordering-policy}]}\n"
    )
    flow = load_picker_config(None, head + plugins + section, source="slo.yaml").flow_control
    assert flow is not None and isinstance(flow.band(5).ordering, SloDeadlineOrdering)
    bad = plugins.replace(
        "slo-deadline-ordering-policy\n", "slo-deadline-ordering-policy\n  parameters: {x: 1}\n"
    )
    with pytest.raises(ConfigError, match="takes no parameters"):
        load_picker_config(None, head + bad + section, source="slo.yaml")


SLOS = st.one_of(st.none(), st.integers(0, 5000).map(str), st.sampled_from(["", "abc", "-3"]))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 2), SLOS, st.sampled_from(["a", "b"])), min_size=1, max_size=40))
def test_queues_dispatch_by_slo_deadline_then_arrival(arrivals: list[tuple[float, str | None, str]]) -> None:
    """One flow per fairness id, global-strict fairness: the band goes in (deadline, arrival) order."""
    section = parse_flow_control({"defaultPriorityBand": {"orderingPolicyRef": "slo"}})
    config = resolve_flow_control(section, "llm-d.ai/v1alpha1", {"slo": POLICY}.__getitem__, ("slo",))
    queues = FlowQueues(config)
    now, pushed = NOW, []
    for gap, slo, flow in arrivals:
        now += gap
        headers = {} if slo is None else {"x-llm-d-slo-ttft-ms": slo}
        pushed.append(queues.push(0, flow, 1, now, math.inf, None, "", headers))
    order = []
    while (popped := queues.pop_next(lambda _: True)) is not None:
        order.append(popped)
    assert order == sorted(pushed, key=lambda i: (slo_deadline(i), i.seq))


async def test_the_controller_queues_requests_with_their_headers() -> None:
    section = parse_flow_control({"defaultPriorityBand": {"orderingPolicyRef": "slo"}})
    config = resolve_flow_control(section, "llm-d.ai/v1alpha1", {"slo": POLICY}.__getitem__, ("slo",))
    detector = Detector(level=1.0)
    controller = FlowController(config, detector, lambda: (), lambda: NOW)
    dispatched: list[str] = []
    tickets = []
    for rid, slo in (("loose", "5000"), ("none", None), ("tight", "100")):
        headers = {} if slo is None else {"x-llm-d-slo-ttft-ms": slo}
        req = LLMRequest(request_id=rid, model="m", target_model="m", headers=headers)
        ticket = controller.offer(req, lambda rid=rid: dispatched.append(rid))  # type: ignore[misc]
        assert ticket is not None
        tickets.append(ticket)
    detector.level = 0.0
    controller.kick()
    await asyncio.wait_for(asyncio.gather(*(controller.wait(t) for t in tickets)), 1)
    assert dispatched == ["tight", "loose", "none"]
    controller.close()
