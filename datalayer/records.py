"""Immutable value types of the data layer: what discovery produces and what a snapshot holds.

* :class:`EndpointSpec` is what discovery knows about an endpoint (address, name, labels, engine).
* :class:`EndpointMetrics` is one good scrape of the model server (structurally a scheduler
  ``MetricsView``); ``updated_at`` is the monotonic time of that scrape, 0.0 when never scraped.
* :class:`EndpointRecord` is one endpoint as a scheduling cycle sees it (structurally a scheduler
  ``EndpointView``). Records are never mutated: every scrape builds a new record and swaps it in
  atomically, so a cycle never sees half-updated metrics.

Health states: ``UNKNOWN`` (not scraped yet), ``HEALTHY`` (last scrape good and fresh), ``STALE``
(no good scrape for longer than the staleness threshold, e.g. a server that hangs), ``UNHEALTHY``
(the last scrape failed: refused, timed out, 5xx, unparsable or oversized body). Only ``HEALTHY``
endpoints are ``ready``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "EMPTY_METRICS",
    "ENGINE_LABEL",
    "LLMD_ENGINE_LABEL",
    "DiscoveryEvent",
    "EndpointMetrics",
    "EndpointRecord",
    "EndpointSpec",
    "EventKind",
    "Health",
    "frozen_mapping",
]

ENGINE_LABEL = "inference.networking.k8s.io/engine-type"
"""Pod / endpoint label naming the model-server engine (vllm when absent): GIE's."""
LLMD_ENGINE_LABEL = "llm-d.ai/engine-type"
"""llm-d-router's engine label; it takes precedence over GIE's when both are set."""

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def frozen_mapping(values: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A read-only copy of ``values`` (the shared empty mapping when empty)."""
    return MappingProxyType(dict(values)) if values else _EMPTY


def _empty() -> Mapping[str, Any]:
    return _EMPTY


class Health(enum.Enum):
    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    STALE = "stale"
    UNHEALTHY = "unhealthy"


@dataclass(frozen=True, slots=True)
class EndpointMetrics:
    """One good scrape of a model server (a scheduler ``MetricsView``)."""

    waiting_queue_size: int = 0
    running_requests: int = 0
    kv_cache_usage: float = 0.0
    max_lora: int = 0
    running_adapters: frozenset[str] = frozenset()
    waiting_adapters: frozenset[str] = frozenset()
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    updated_at: float = 0.0


EMPTY_METRICS = EndpointMetrics()


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """An endpoint as discovery sees it. ``address`` (``ip:port``; a ``host:port`` from
    ``multicluster-file-discovery``) is its identity. ``pod_name`` and ``node_address`` (the pod's
    ``status.hostIP``) are set by Kubernetes discovery only (empty otherwise); the ``dcgm-*`` plugins use
    them. ``metrics_host`` (``host:port``, empty: ``address``) is where the data sources scrape unless a
    source sets its own ``port`` (upstream's ``MetricsHost``; only ``multicluster-file-discovery`` sets
    it apart from the address, from an entry's ``metricsAddress`` / ``metricsPort`` labels)."""

    address: str
    name: str
    labels: Mapping[str, str] = field(default_factory=_empty)
    engine: str = "vllm"
    pod_name: str = ""
    node_address: str = ""
    metrics_host: str = ""

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])


class EventKind(enum.Enum):
    ADDED = "added"
    UPDATED = "updated"  # same address, new name / labels / engine
    REMOVED = "removed"


@dataclass(frozen=True, slots=True)
class DiscoveryEvent:
    kind: EventKind
    spec: EndpointSpec


@dataclass(frozen=True, slots=True)
class EndpointRecord:
    """One endpoint in a snapshot (a scheduler ``EndpointView``); replaced, never mutated."""

    address: str
    name: str
    labels: Mapping[str, str] = field(default_factory=_empty)
    ready: bool = False
    metrics: EndpointMetrics = EMPTY_METRICS
    attributes: Mapping[str, Any] = field(default_factory=_empty)
    engine: str = "vllm"
    health: Health = Health.UNKNOWN
    last_error: str | None = None

    def age(self, now: float) -> float:
        """Seconds since the last good scrape (infinite when never scraped)."""
        updated = self.metrics.updated_at
        return now - updated if updated > 0.0 else float("inf")

    def is_stale(self, now: float, threshold: float) -> bool:
        return self.age(now) > threshold

    @classmethod
    def from_spec(cls, spec: EndpointSpec) -> EndpointRecord:
        return cls(address=spec.address, name=spec.name, labels=spec.labels, engine=spec.engine)
