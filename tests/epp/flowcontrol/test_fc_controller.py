"""The flow controller's outcomes, each on its own path, with a fake detector and a fake clock."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from epp.flowcontrol.controller import FlowController, Ticket
from epp.flowcontrol.metrics import FlowMetrics, queue_gauges
from epp.request.errors import RequestError
from epp.server.metric_catalog import Naming, by_key
from epp.server.metric_twin import Twin
from tests.epp.flowcontrol.fc_fakes import FC_KEYS, Detector, fc_config, request
from tests.epp.server.srv_helpers import ENDPOINTS


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make(section: dict[str, object] | None = None, detector: Detector | None = None):  # type: ignore[no-untyped-def]
    registry = CollectorRegistry()
    twins = {k: Twin(by_key(k), Naming.BOTH, registry) for k in FC_KEYS}
    clock = Clock()
    detector = detector or Detector(level=1.0)
    endpoints = list(ENDPOINTS)
    flow = FlowController(fc_config(section), detector, lambda: endpoints, clock, FlowMetrics(twins, "pool"),
                          poll_interval=0.001)  # fmt: skip
    return flow, detector, clock, registry, endpoints


def outcome_count(registry: CollectorRegistry, outcome: str) -> float:
    value = registry.get_sample_value(
        "llm_d_epp_flow_control_requests_total",
        {"outcome": outcome, "priority": "0", "inference_pool": "pool"},
    )
    return value or 0.0


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_fast_path_when_nothing_waits_and_the_pool_has_room() -> None:
    flow, _, _, registry, _ = make(detector=Detector(level=0.5))
    assert flow.offer(request("r1"), lambda: None) is None
    assert outcome_count(registry, "Dispatched") == 1
    assert (
        registry.get_sample_value(
            "inference_extension_flow_control_request_queue_duration_seconds_count",
            {
                "fairness_id": "default-flow",
                "priority": "0",
                "outcome": "Dispatched",
                "inference_pool": "pool",
                "model_name": "m",
                "target_model_name": "m",
            },
        )
        == 1
    )


async def test_queued_while_saturated_dispatched_when_capacity_frees() -> None:
    flow, detector, clock, registry, _ = make()
    dispatched: list[str] = []
    ticket = flow.offer(request("r1"), lambda: dispatched.append("r1"))
    assert isinstance(ticket, Ticket)
    waiter = asyncio.ensure_future(flow.wait(ticket))
    await asyncio.sleep(0.01)  # polls while saturated: nothing goes
    assert not waiter.done() and dispatched == [] and len(flow.queues) == 1
    rows = queue_gauges(flow, "pool")
    assert rows["fc_queue_size"][0][1] == 1 and rows["fc_queue_bytes"][0][1] == 10
    clock.t += 2.0
    detector.level = 0.2
    flow.kick()
    assert await waiter is None
    assert dispatched == ["r1"] and len(flow.queues) == 0
    assert outcome_count(registry, "Dispatched") == 1
    assert registry.get_sample_value(
        "inference_extension_flow_control_request_queue_duration_seconds_sum",
        {
            "fairness_id": "default-flow",
            "priority": "0",
            "outcome": "Dispatched",
            "inference_pool": "pool",
            "model_name": "m",
            "target_model_name": "m",
        },
    ) == pytest.approx(2.0)


async def test_dispatch_stops_as_soon_as_the_pool_is_full_again() -> None:
    """Each dispatch counts at once (the callback routes it), so a pass sends exactly the free room."""
    detector = Detector(limit=2)
    detector.inflight = 2
    flow, *_ = make(detector=detector)
    sent: list[str] = []

    def go(rid: str) -> None:
        detector.inflight += 1
        sent.append(rid)

    tickets = [flow.offer(request(f"r{i}"), lambda i=i: go(f"r{i}")) for i in range(5)]
    assert all(t is not None for t in tickets)
    detector.inflight = 0
    flow.kick()
    await settle()
    assert sent == ["r0", "r1"] and len(flow.queues) == 3


async def test_capacity_overflow_is_429_and_counted() -> None:
    flow, _, _, registry, _ = make({"priorityBands": [{"priority": 0, "maxRequests": 1}]})
    assert flow.offer(request("r1"), lambda: None) is not None
    with pytest.raises(RequestError) as exc:
        flow.offer(request("r2"), lambda: None)
    assert exc.value.status == 429 and "priority band 0 is full (maxRequests 1)" in exc.value.message
    assert outcome_count(registry, "RejectedCapacity") == 1


async def test_ttl_expiry_is_503_and_counted() -> None:
    flow, _, clock, registry, _ = make({"defaultRequestTTL": "30s"})
    ticket = flow.offer(request("r1"), lambda: None)
    assert ticket is not None
    waiter = asyncio.ensure_future(flow.wait(ticket))
    clock.t += 29.0
    flow.kick()
    await settle()
    assert not waiter.done()
    clock.t += 1.0
    flow.kick()
    error = await waiter
    assert error is not None and error.status == 503 and "timed out in queue after 30s" in error.message
    assert outcome_count(registry, "EvictedTTL") == 1 and len(flow.queues) == 0


async def test_no_endpoint_ttl_applies_while_the_pool_is_empty() -> None:
    flow, _, clock, _, endpoints = make({"defaultRequestTTL": "60s", "noEndpointRequestTTL": "5s"})
    ticket = flow.offer(request("r1"), lambda: None)
    assert ticket is not None
    waiter = asyncio.ensure_future(flow.wait(ticket))
    endpoints.clear()
    flow.kick()
    await settle()  # the empty-pool regime starts now
    clock.t += 5.0
    flow.kick()
    error = await waiter
    assert error is not None and "after 5s" in error.message


async def test_client_gone_while_queued_is_counted_and_leaves_the_queue() -> None:
    flow, detector, _, registry, _ = make()
    dispatched: list[str] = []
    ticket = flow.offer(request("r1"), lambda: dispatched.append("r1"))
    assert ticket is not None
    waiter = asyncio.ensure_future(flow.wait(ticket))
    await settle()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert len(flow.queues) == 0 and outcome_count(registry, "EvictedContextCancelled") == 1
    flow.cancel(ticket)  # idempotent (the stream's end calls it too)
    assert outcome_count(registry, "EvictedContextCancelled") == 1
    detector.level = 0.0
    flow.kick()
    await settle()
    assert dispatched == []


async def test_shutdown_answers_queued_requests_and_refuses_new_ones() -> None:
    flow, _, _, registry, _ = make()
    ticket = flow.offer(request("r1"), lambda: None)
    assert ticket is not None
    flow.close()
    error = await flow.wait(ticket)
    assert error is not None and error.status == 503 and "shutting down" in error.message
    assert outcome_count(registry, "EvictedOther") == 1
    with pytest.raises(RequestError) as exc:
        flow.offer(request("r2"), lambda: None)
    assert exc.value.status == 503 and outcome_count(registry, "RejectedOther") == 1


async def test_strict_priority_and_round_robin_end_to_end() -> None:
    flow, detector, *_ = make({"defaultPriorityBand": {"fairnessPolicyRef": "rr"}})
    order: list[str] = []
    for rid, prio, tenant in [("a1", 0, "A"), ("a2", 0, "A"), ("a3", 0, "A"), ("b1", 0, "B"), ("lo", -1, "A"),
                              ("hi", 5, "C"), ("b2", 0, "B")]:  # fmt: skip
        flow.offer(request(rid, prio, tenant), lambda rid=rid: order.append(rid))
    detector.level = 0.0
    flow.kick()
    await settle()
    assert order == ["hi", "a1", "b1", "a2", "b2", "a3", "lo"]
