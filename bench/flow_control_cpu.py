"""Picker CPU that flow control adds per request (``epp-bench flow-control``'s in-process figure): the
controller's fast path, and a request through the queue, with round-robin or fair-share fairness."""

from __future__ import annotations

import asyncio
import time
from functools import partial

__all__ = ["cpu_per_request"]


def cpu_per_request(n: int, fair_share: bool = False) -> tuple[float, float]:
    """Microseconds of CPU per request the controller adds: fast path, and through the queue; with
    ``fair_share``, the band's policy is ``fair-share-fairness-policy`` and each request also runs its
    dispatch and completion hooks (its in-flight counting); otherwise ``round-robin-fairness-policy``."""
    from prometheus_client import CollectorRegistry

    from epp.flowcontrol.config import parse_flow_control, resolve_flow_control
    from epp.flowcontrol.controller import FlowController
    from epp.flowcontrol.metrics import FlowMetrics
    from epp.server.metric_catalog import Naming, by_key
    from epp.server.metric_twin import Twin
    from scheduler.plugins.flowcontrol.fair_share import FairShareFairness, FairShareParams
    from scheduler.plugins.flowcontrol.fairness import RoundRobinFairness
    from scheduler.types import Completion, LLMRequest, Outcome, SchedulingResult

    share = FairShareFairness("p", FairShareParams(0.25, 1.0))
    policy = share if fair_share else RoundRobinFairness("p")
    section = parse_flow_control({"defaultPriorityBand": {"fairnessPolicyRef": "p"}})
    config = resolve_flow_control(section, "llm-d.ai/v1alpha1", {"p": policy}.__getitem__, ("p",))
    result, completion = SchedulingResult("default", (), {}), Completion(Outcome.OK, 200)

    def served(r: LLMRequest) -> None:
        if fair_share:
            share.on_dispatched(r, result)
            share.on_completed(r, result, completion)

    class Detector:
        name = plugin_type = "bench"
        level = 0.0

        def saturation(self, endpoints: object, now: float) -> float:
            return self.level

        def is_saturated(self, endpoints: object, now: float) -> bool:
            return self.level >= 1

    requests = [LLMRequest(f"r{i}", "m", "m", fairness_id=f"t{i % 8}", priority=i % 3, body_size=100)
                for i in range(n)]  # fmt: skip
    endpoints = [object()]

    async def measure() -> tuple[float, float]:
        detector = Detector()
        registry = CollectorRegistry()  # the metrics are recorded as in the server
        keys = ("fc_queue_duration", "fc_dispatch_cycle", "fc_enqueue_duration", "fc_requests")
        recorder = FlowMetrics({k: Twin(by_key(k), Naming.BOTH, registry) for k in keys}, "pool")
        snapshot = lambda: endpoints  # noqa: E731
        flow = FlowController(config, detector, snapshot, recorder=recorder)  # type: ignore[arg-type]

        start = time.process_time()
        for r in requests:
            if flow.offer(r, partial(served, r)) is None:
                served(r)
        fast = (time.process_time() - start) / n * 1e6
        start = time.process_time()
        for batch in range(0, n, 3000):  # within the bands' default capacity (5000)
            detector.level = 1.0
            for r in requests[batch : batch + 3000]:
                flow.offer(r, partial(served, r))
            detector.level = 0.0
            flow.kick()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert not flow.queues.count
        queued = (time.process_time() - start) / n * 1e6
        return fast, queued

    return asyncio.run(measure())
