"""Scrape-time gauges of the pool: ``inference_pool_*``, flow-control saturation, prefix index size.

Computed from the data layer's snapshot when Prometheus scrapes, never per request. Averages are over
ready endpoints (0 with none); ``inference_pool_per_pod_queue_size`` lists every endpoint (ready or not)
by name. ``inference_extension_flow_control_pool_saturation`` is the saturation detector's value for the
snapshot (0 without a detector); the flow-control queue gauges are always 0 because flow control is not
implemented yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from scheduler.types import EndpointView

__all__ = ["PoolCollector"]


class PoolCollector(Collector):
    """Scrape-time pool gauges from ``snapshot()`` (ready endpoints only for the averages).

    ``saturation()`` returns the detector's value for the current snapshot (None = no detector);
    ``index_size()`` the prefix index's entry count (None = no prefix index).
    """

    def __init__(
        self,
        pool_name: str,
        snapshot: Callable[[], Sequence[EndpointView]],
        *,
        saturation: Callable[[Sequence[EndpointView]], float | None] = lambda _: None,
        index_size: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._name = pool_name
        self._snapshot = snapshot
        self._saturation = saturation
        self._index_size = index_size

    def collect(self) -> Iterable[GaugeMetricFamily]:
        endpoints = list(self._snapshot())
        ready = [e for e in endpoints if e.ready]
        n = len(ready)
        name = self._name
        p = "inference_pool_"
        for metric, doc, value in (
            ("average_kv_cache_utilization", "Mean KV-cache utilisation of ready endpoints",
             sum(e.metrics.kv_cache_usage for e in ready) / n if n else 0.0),
            ("average_queue_size", "Mean waiting queue of ready endpoints",
             sum(e.metrics.waiting_queue_size for e in ready) / n if n else 0.0),
            ("average_running_requests", "Mean running requests of ready endpoints",
             sum(e.metrics.running_requests for e in ready) / n if n else 0.0),
            ("ready_pods", "Ready endpoints", float(n)),
        ):  # fmt: skip
            family = GaugeMetricFamily(p + metric, doc, labels=("name",))
            family.add_metric((name,), value)
            yield family
        per_pod = GaugeMetricFamily(
            p + "per_pod_queue_size", "Waiting queue per endpoint", labels=("name", "model_server_pod")
        )
        for e in endpoints:
            per_pod.add_metric((name, e.name or e.address), float(e.metrics.waiting_queue_size))
        yield per_pod
        f = "inference_extension_flow_control_"
        saturation = GaugeMetricFamily(
            f + "pool_saturation", "Pool saturation (>= 1 saturated)", labels=("name",)
        )
        saturation.add_metric((name,), float(self._saturation(endpoints) or 0.0))
        yield saturation
        # Flow control (request queueing) is not implemented yet: the queues are always empty.
        yield GaugeMetricFamily(f + "queue_size", "Requests queued by flow control", value=0.0)
        yield GaugeMetricFamily(f + "queue_bytes", "Bytes queued by flow control", value=0.0)
        size = self._index_size()
        yield GaugeMetricFamily(
            "inference_extension_prefix_indexer_size",
            "Entries in the prefix-cache index",
            value=float(size or 0),
        )
