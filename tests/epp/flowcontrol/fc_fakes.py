"""Fakes of the flow-control tests: a settable saturation detector and configuration builders."""

from __future__ import annotations

from collections.abc import Sequence

from epp.flowcontrol.config import FlowControlConfig, parse_flow_control, resolve_flow_control
from scheduler.plugins.flowcontrol.fairness import GlobalStrictFairness, RoundRobinFairness
from scheduler.plugins.flowcontrol.ordering import EdfOrdering, FcfsOrdering
from scheduler.types import EndpointView, LLMRequest

FC_KEYS = ("fc_queue_duration", "fc_dispatch_cycle", "fc_enqueue_duration", "fc_requests")
POLICIES = {
    "rr": RoundRobinFairness("rr"),
    "strict": GlobalStrictFairness("strict"),
    "fcfs": FcfsOrdering("fcfs"),
    "edf": EdfOrdering("edf"),
}


def fc_config(section: dict[str, object] | None = None, api: str = "llm-d.ai/v1alpha1") -> FlowControlConfig:
    """A resolved configuration; policy refs may name the fakes of :data:`POLICIES`."""
    return resolve_flow_control(parse_flow_control(section or {}), api, POLICIES.__getitem__, tuple(POLICIES))


class Detector:
    """``saturation`` = ``level`` (set by the test); or in-flight / ``limit`` when ``limit`` is set."""

    name = "fake-detector"
    plugin_type = "fake-detector"

    def __init__(self, level: float = 0.0, limit: int = 0) -> None:
        self.level = level
        self.limit = limit
        self.inflight = 0

    def saturation(self, endpoints: Sequence[EndpointView], now: float) -> float:
        if self.limit:
            return self.inflight / self.limit
        return self.level

    def is_saturated(self, endpoints: Sequence[EndpointView], now: float) -> bool:
        return self.saturation(endpoints, now) >= 1.0


def request(rid: str, priority: int = 0, fairness: str = "default-flow", size: int = 10) -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", priority=priority,
                      fairness_id=fairness, body_size=size)  # fmt: skip
