"""Flow-control metrics under upstream's names (both schemes, as ``--metrics-naming`` selects).

Recorded as outcomes happen (:class:`FlowMetrics`, the controller's recorder):
``inference_extension_flow_control_request_queue_duration_seconds{fairness_id, priority, outcome,
inference_pool, model_name, target_model_name}`` (fast-path dispatches observe 0),
``..._request_enqueue_duration_seconds{fairness_id, priority, outcome}``,
``..._dispatch_cycle_duration_seconds`` and ``llm_d_epp_flow_control_requests{outcome, priority,
inference_pool}``.

Computed when Prometheus scrapes (:func:`queue_gauges`, fed to the pool collector):
``..._queue_size`` / ``..._queue_bytes`` per (fairness id, priority, model, target model) over the
queued requests, and llm-d-router's capacity utilisation gauges (fraction of each band's and of the
pool's ``maxRequests`` / ``maxBytes`` in use; the pool's only when that limit is set).

Client-chosen label values (fairness id, model names) are capped at
:data:`~epp.server.metrics.LABEL_CAP` distinct values each (then ``other``); label children are cached
up to :data:`~epp.server.metrics.CHILD_CACHE_BUDGET` sets.
"""

from __future__ import annotations

from collections.abc import Mapping

from epp.flowcontrol.controller import FlowController
from epp.server.metric_twin import Recorder, Twin
from epp.server.metrics import CHILD_CACHE_BUDGET, LABEL_CAP, OVERFLOW
from scheduler.types import LLMRequest

__all__ = ["FlowMetrics", "queue_gauges"]


class _Cap:
    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self.seen or not value:
            return value
        if len(self.seen) >= LABEL_CAP:
            return OVERFLOW
        self.seen.add(value)
        return value


class FlowMetrics:
    """The controller's :class:`~epp.flowcontrol.controller.FlowRecorder`. ``twins``: the families
    registered by the scheduler metrics (keys ``fc_queue_duration``, ``fc_enqueue_duration``,
    ``fc_dispatch_cycle``, ``fc_requests``)."""

    def __init__(self, twins: Mapping[str, Twin], pool: str) -> None:
        self._queue = twins["fc_queue_duration"]
        self._enqueue = twins["fc_enqueue_duration"]
        self._requests = twins["fc_requests"]
        self._cycle = twins["fc_dispatch_cycle"].bind({})
        self._pool = pool
        self._fairness = _Cap()
        self._models = _Cap()
        self._children: dict[tuple[str, str, str, int, str], tuple[Recorder, Recorder]] = {}
        self._enqueue_children: dict[tuple[str, int, str], Recorder] = {}

    def outcome(self, request: LLMRequest, outcome: str, waited: float) -> None:
        key = (request.model, request.target_model, request.fairness_id, request.priority, outcome)
        children = self._children.get(key)
        if children is None:
            priority = str(request.priority)
            values = {
                "fairness_id": self._fairness(request.fairness_id),
                "priority": priority,
                "outcome": outcome,
                "inference_pool": self._pool,
                "model_name": self._models(request.model),
                "target_model_name": self._models(request.target_model),
            }
            children = (self._queue.bind(values), self._requests.bind(values))
            if len(self._children) < CHILD_CACHE_BUDGET:
                self._children[key] = children
        children[0].observe(waited)
        children[1].inc()

    def enqueued(self, request: LLMRequest, outcome: str, seconds: float) -> None:
        key = (request.fairness_id, request.priority, outcome)
        child = self._enqueue_children.get(key)
        if child is None:
            values = {"fairness_id": self._fairness(request.fairness_id), "priority": str(request.priority),
                      "outcome": outcome}  # fmt: skip
            child = self._enqueue.bind(values)
            if len(self._enqueue_children) < CHILD_CACHE_BUDGET:
                self._enqueue_children[key] = child
        child.observe(seconds)

    def cycle(self, seconds: float) -> None:
        self._cycle.observe(seconds)


def queue_gauges(controller: FlowController, pool: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Rows of the scrape-time flow-control gauges, by catalog key (O(queued requests))."""
    size: dict[tuple[str, str, str, str], float] = {}
    nbytes: dict[tuple[str, str, str, str], float] = {}
    for item in controller.queues.items():
        request: LLMRequest = item.payload.request
        k = (request.fairness_id, str(item.priority), request.model, request.target_model)
        size[k] = size.get(k, 0.0) + 1
        nbytes[k] = nbytes.get(k, 0.0) + item.size

    def rows(acc: dict[tuple[str, str, str, str], float]) -> list[tuple[dict[str, str], float]]:
        return [
            (
                {
                    "fairness_id": f,
                    "priority": p,
                    "inference_pool": pool,
                    "model_name": m,
                    "target_model_name": t,
                },
                v,
            )
            for (f, p, m, t), v in acc.items()
        ]

    config = controller.config
    band_requests, band_bytes = [], []
    for band in controller.queues.bands():
        labels = {"priority": str(band.priority), "inference_pool": pool}
        band_requests.append((labels, band.count / band.config.max_requests))
        band_bytes.append((labels, band.bytes / band.config.max_bytes))
    out = {
        "fc_queue_size": rows(size),
        "fc_queue_bytes": rows(nbytes),
        "fc_capacity_requests": band_requests,
        "fc_capacity_bytes": band_bytes,
    }
    queues = controller.queues
    if config.max_requests:
        out["fc_global_capacity_requests"] = [({"inference_pool": pool}, queues.count / config.max_requests)]
    if config.max_bytes:
        out["fc_global_capacity_bytes"] = [({"inference_pool": pool}, queues.bytes / config.max_bytes)]
    return out
