"""Resolve ``x-gateway-inference-objective`` to a priority.

Missing header -> 0. Unknown objective name -> 0, counted in :attr:`ObjectivePriorities.unknown_total`
and reported to the optional ``on_unknown(name)`` callback (the server wires it to a metric). An
instance is the ``SessionConfig.priority_of`` callable.
"""

from __future__ import annotations

from collections.abc import Callable

from epp.admission.objectives import ObjectiveStore

__all__ = ["ObjectivePriorities"]


class ObjectivePriorities:
    """``priorities(name_or_None) -> int`` backed by an :class:`ObjectiveStore`."""

    __slots__ = ("_on_unknown", "_store", "unknown_total")

    def __init__(self, store: ObjectiveStore, on_unknown: Callable[[str], None] | None = None) -> None:
        self._store = store
        self._on_unknown = on_unknown
        self.unknown_total = 0

    def __call__(self, name: str | None) -> int:
        if not name:
            return 0
        objective = self._store.get(name)
        if objective is None:
            self.unknown_total += 1
            if self._on_unknown is not None:
                self._on_unknown(name)
            return 0
        return objective.priority
