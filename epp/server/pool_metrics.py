"""Scrape-time gauges of the pool: averages, standard deviations, per-endpoint queues, saturation,
prefix index sizes, and the flow-control gauges (queue size and bytes, capacity utilisation; empty
while flow control is off).

Computed from the data layer's snapshot when Prometheus scrapes, never per request, with upstream's
arithmetic: over the ready endpoints (those with fresh metrics), mean and *sample* standard deviation
(divisor ``max(1, n - 1)``), both rounded to two decimals; with no ready endpoint the ready count is 0
and the averages and deviations read 0. The per-endpoint queue lists every endpoint (ready or not) by
name. ``flow_control_pool_saturation{stage="effective"}`` is the saturation detector's value for the
snapshot, exported only when a saturation detector is configured (this picker has no prefill/decode
stage split, so only the ``effective`` stage); ``flow_control_stale_endpoints{detector}`` counts the
snapshot's endpoints whose metrics that detector finds missing or stale, for a ``utilization-detector``
(upstream records it from that detector only). Families go under the names ``--metrics-naming``
selects.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from epp.server.metric_catalog import Family, Naming, Scheme, by_key
from scheduler.types import EndpointView

__all__ = ["PoolCollector", "mean_and_stdev"]

_FLOW_GAUGES = ("fc_queue_size", "fc_queue_bytes", "fc_capacity_requests",
                 "fc_capacity_bytes", "fc_global_capacity_requests", "fc_global_capacity_bytes",
                 "fc_reclaim_target", "fc_pending_reclaim")  # fmt: skip


def mean_and_stdev(values: Sequence[float]) -> tuple[float, float]:
    """Upstream's pool summary: mean and sample standard deviation, rounded to 2 decimals."""
    n = len(values)
    if not n:
        return 0.0, 0.0
    mean = sum(values) / n
    ss = sum((v - mean) ** 2 for v in values)
    return round(mean, 2), round(math.sqrt(ss / max(1, n - 1)), 2)


class PoolCollector(Collector):
    """Scrape-time pool gauges from ``snapshot()``.

    ``saturation(endpoints)`` returns the detector's value for a snapshot (None = no detector);
    ``index_sizes()`` each prefix index as (plugin name, plugin type, entries); ``stale(endpoints)``
    the utilization detector's (name, endpoints with missing or stale metrics), None without one.
    """

    def __init__(
        self,
        pool_name: str,
        snapshot: Callable[[], Sequence[EndpointView]],
        *,
        saturation: Callable[[Sequence[EndpointView]], float | None] = lambda _: None,
        index_sizes: Callable[[], list[tuple[str, str, int]]] = list,
        stale: Callable[[Sequence[EndpointView]], tuple[str, int] | None] = lambda _: None,
        naming: Naming = Naming.BOTH,
        flow_rows: Callable[[], Mapping[str, list[tuple[dict[str, str], float]]]] = dict,
    ) -> None:
        """``flow_rows()``: the flow-control gauges' rows by catalog key
        (:func:`epp.flowcontrol.metrics.queue_gauges`); keys it leaves out are exported empty."""
        self._flow_rows = flow_rows
        self._name = pool_name
        self._snapshot = snapshot
        self._saturation = saturation
        self._index_sizes = index_sizes
        self._stale = stale
        self._schemes = [s for s in (Scheme.LLM_D, Scheme.INFERENCE) if naming.exports(s)]

    def _families(self, key: str) -> list[tuple[GaugeMetricFamily, tuple[str, ...]]]:
        family: Family = by_key(key)
        out = []
        for scheme in self._schemes:
            name = family.name(scheme)
            if name is not None:
                labels = family.labels(scheme)
                out.append((GaugeMetricFamily(name, family.help, labels=labels), labels))
        return out

    def _gauge(self, key: str, rows: Iterable[tuple[dict[str, str], float]]) -> list[GaugeMetricFamily]:
        """The families of ``key``; rows whose labels coincide in a scheme are summed (e.g. the
        unlabelled ``inference_extension_prefix_indexer_size`` over several prefix scorers)."""
        families = self._families(key)
        sums: list[dict[tuple[str, ...], float]] = [{} for _ in families]
        for values, value in rows:
            for acc, (_, labels) in zip(sums, families, strict=True):
                k = tuple(values[n] for n in labels)
                acc[k] = acc.get(k, 0.0) + value
        for acc, (family, _) in zip(sums, families, strict=True):
            for k, v in acc.items():
                family.add_metric(list(k), v)
        return [f for f, _ in families]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        endpoints = list(self._snapshot())
        ready = [e for e in endpoints if e.ready]
        pool = {"name": self._name}
        kv = mean_and_stdev([e.metrics.kv_cache_usage for e in ready])
        queue = mean_and_stdev([float(e.metrics.waiting_queue_size) for e in ready])
        running = mean_and_stdev([float(e.metrics.running_requests) for e in ready])
        for key, value in (
            ("pool_avg_kv", kv[0]), ("pool_std_kv", kv[1]),
            ("pool_avg_queue", queue[0]), ("pool_std_queue", queue[1]),
            ("pool_avg_running", running[0]), ("pool_std_running", running[1]),
            ("pool_ready", float(len(ready))),
        ):  # fmt: skip
            yield from self._gauge(key, [(pool, value)])
        yield from self._gauge(
            "pool_per_endpoint_queue",
            (
                (
                    {
                        "name": self._name,
                        "model_server_endpoint": e.name or e.address,
                        "model_server_pod": e.name or e.address,
                    },
                    float(e.metrics.waiting_queue_size),
                )
                for e in endpoints
            ),
        )
        saturation = self._saturation(endpoints)
        rows = (
            [] if saturation is None else [({"inference_pool": self._name, "stage": "effective"}, saturation)]
        )
        yield from self._gauge("fc_pool_saturation", rows)
        stale = self._stale(endpoints)
        rows = [] if stale is None else [({"detector": stale[0]}, float(stale[1]))]
        yield from self._gauge("fc_stale_endpoints", rows)
        flow = self._flow_rows()
        for key in _FLOW_GAUGES:
            yield from self._gauge(key, flow.get(key, []))
        sizes = self._index_sizes()
        yield from self._gauge(
            "prefix_size", [({"plugin_name": n, "plugin_type": t}, float(size)) for n, t, size in sizes]
        )
