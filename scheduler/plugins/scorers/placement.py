"""Shared parameters of the placement scorers ``binpack-scorer`` and ``spread-scorer`` (GPUStack).

"Load" of an endpoint, by the ``load`` parameter:

=========  ==============================  ===========================
``load``   value                           default ``capacity``
=========  ==============================  ===========================
kv         ``metrics.kv_cache_usage``      1.0
queue      ``metrics.waiting_queue_size``  128
running    ``metrics.running_requests``    256 (vLLM ``max_num_seqs``)
=========  ==============================  ===========================

An endpoint *fits* while ``load < capacity``. ``fill = min(load, capacity) / capacity`` in [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.params import param
from scheduler.types import EndpointView

__all__ = ["DEFAULT_CAPACITY", "LOAD_KINDS", "PlacementParams", "loads"]

LOAD_KINDS = ("kv", "queue", "running")
DEFAULT_CAPACITY = {"kv": 1.0, "queue": 128.0, "running": 256.0}


@dataclass(frozen=True, slots=True)
class PlacementParams:
    load: str = param("kv", choices=LOAD_KINDS)
    capacity: float | None = param(None, gt=0)

    @property
    def effective_capacity(self) -> float:
        return self.capacity if self.capacity is not None else DEFAULT_CAPACITY[self.load]


def loads(kind: str, endpoints: Sequence[EndpointView]) -> list[float]:
    """The load of each endpoint, aligned with ``endpoints``."""
    if kind == "kv":
        return [e.metrics.kv_cache_usage for e in endpoints]
    if kind == "queue":
        return [float(e.metrics.waiting_queue_size) for e in endpoints]
    return [float(e.metrics.running_requests) for e in endpoints]
