"""InferenceObjective objects: the priority a request gets from ``x-gateway-inference-objective``.

An objective is the CRD ``inference.networking.x-k8s.io/v1alpha2`` ``InferenceObjective``::

    apiVersion: inference.networking.x-k8s.io/v1alpha2
    kind: InferenceObjective
    metadata: {name: critical, namespace: default}
    spec: {priority: 10, poolRef: {name: my-pool}}

``spec.priority`` is an integer (absent -> 0; negative = sheddable). :class:`ObjectiveStore` is the
read interface the request path uses; :class:`InMemoryObjectiveStore` implements it with ``upsert`` /
``delete`` so a Kubernetes watch (or the standalone file loader) can feed it. Reads are a dict lookup
and are safe from the event loop while a writer replaces entries (single-threaded asyncio, or atomic
dict operations under the GIL).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["InMemoryObjectiveStore", "InferenceObjective", "ObjectiveStore"]


@dataclass(frozen=True, slots=True)
class InferenceObjective:
    """One objective: ``name`` -> ``priority``; ``pool`` is ``spec.poolRef.name`` ("" if absent)."""

    name: str
    priority: int = 0
    pool: str = ""
    namespace: str = ""


class ObjectiveStore(Protocol):
    """Read access to the known objectives."""

    def get(self, name: str) -> InferenceObjective | None:
        """The objective called ``name``, or None when unknown."""
        ...


class InMemoryObjectiveStore:
    """A mutable :class:`ObjectiveStore` keyed by objective name."""

    __slots__ = ("_by_name", "_priorities")

    def __init__(self, objectives: Iterable[InferenceObjective] = ()) -> None:
        self._by_name: dict[str, InferenceObjective] = {o.name: o for o in objectives}
        self._priorities: frozenset[int] | None = None

    def priorities(self) -> frozenset[int]:
        """The distinct priorities of the objectives: the same object until the set of objectives
        changes (flow control's provisioned priority levels)."""
        if self._priorities is None:
            self._priorities = frozenset(o.priority for o in self._by_name.values())
        return self._priorities

    def get(self, name: str) -> InferenceObjective | None:
        return self._by_name.get(name)

    def upsert(self, objective: InferenceObjective) -> None:
        """Add or replace the objective with this name."""
        self._by_name[objective.name] = objective
        self._priorities = None

    def delete(self, name: str) -> None:
        """Forget the objective called ``name`` (no error when unknown)."""
        self._by_name.pop(name, None)
        self._priorities = None

    def replace_all(self, objectives: Iterable[InferenceObjective]) -> None:
        """Swap the whole set atomically (a resync)."""
        self._by_name = {o.name: o for o in objectives}
        self._priorities = None

    def __len__(self) -> int:
        return len(self._by_name)
