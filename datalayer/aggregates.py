"""Pool-level aggregates for the picker's ``inference_pool_*`` metrics, from fresh endpoints only.

An endpoint is *fresh* when it is ready and its last good scrape is at most ``threshold`` seconds old.
Over the fresh endpoints: ``average_kv_cache_usage`` = mean KV usage, ``average_queue_size`` = mean
waiting queue, ``average_running_requests`` = mean running requests (all 0.0 when none is fresh),
``ready_endpoints`` = their count, ``per_endpoint_queue`` = endpoint name -> waiting queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from datalayer.records import EndpointRecord

__all__ = ["PoolAggregates", "pool_aggregates"]


@dataclass(frozen=True, slots=True)
class PoolAggregates:
    average_kv_cache_usage: float
    average_queue_size: float
    average_running_requests: float
    ready_endpoints: int
    per_endpoint_queue: Mapping[str, int]


def pool_aggregates(records: Iterable[EndpointRecord], now: float, threshold: float) -> PoolAggregates:
    fresh = [r for r in records if r.ready and not r.is_stale(now, threshold)]
    n = len(fresh)
    if n == 0:
        return PoolAggregates(0.0, 0.0, 0.0, 0, MappingProxyType({}))
    return PoolAggregates(
        average_kv_cache_usage=sum(r.metrics.kv_cache_usage for r in fresh) / n,
        average_queue_size=sum(r.metrics.waiting_queue_size for r in fresh) / n,
        average_running_requests=sum(r.metrics.running_requests for r in fresh) / n,
        ready_endpoints=n,
        per_endpoint_queue=MappingProxyType({r.name: r.metrics.waiting_queue_size for r in fresh}),
    )
