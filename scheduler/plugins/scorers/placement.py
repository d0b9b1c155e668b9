"""Shared parameters and base class of the placement scorers ``binpack-scorer`` and ``spread-scorer``.

"Load" of an endpoint, by the ``load`` parameter:

=========  ==============================  ===========================
``load``   value                           default ``capacity``
=========  ==============================  ===========================
kv         ``metrics.kv_cache_usage``      1.0
queue      ``metrics.waiting_queue_size``  128
running    ``metrics.running_requests``    256 (vLLM ``max_num_seqs``)
=========  ==============================  ===========================

An endpoint *fits* while ``load < capacity``. ``fill = min(load, capacity) / capacity`` in [0, 1].

:class:`PlacementScorer` reads the loads of the candidates and leaves the formula (stated in each
scorer's module) to ``score_loads``; :func:`placement_factory` builds a scorer's factory.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import PluginFactory
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "DEFAULT_CAPACITY",
    "LOAD_KINDS",
    "PlacementParams",
    "PlacementScorer",
    "loads",
    "placement_factory",
]

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


class PlacementScorer(PluginBase, ABC):
    """A pure scorer of the endpoints' load against ``capacity``; subclasses give the formula."""

    def __init__(self, name: str, params: PlacementParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or PlacementParams()
        self._kind = params.load
        self._capacity = params.effective_capacity

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        return self.score_loads(loads(self._kind, endpoints), self._capacity)

    @staticmethod
    @abstractmethod
    def score_loads(loads: list[float], capacity: float) -> list[float]:
        """The score in [0, 1] of each load (aligned), for ``capacity`` > 0."""


def placement_factory(scorer_type: type[PlacementScorer]) -> PluginFactory:
    """The configuration factory of a placement scorer (parameters: :class:`PlacementParams`)."""
    return factory_with_params(
        scorer_type.plugin_type, PlacementParams, lambda name, params, handle: scorer_type(name, params)
    )
