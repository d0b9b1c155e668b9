"""``spread-scorer`` (GPUStack placement policy): spread work evenly, the emptiest endpoint first.

The inverse of ``binpack-scorer``, for fault tolerance and even load. With ``load`` and
``capacity`` as in :mod:`scheduler.plugins.scorers.placement`::

    score = 1 - min(max(load, 0), capacity) / capacity      # full (or over) -> 0

Parameters: ``load`` (``kv`` | ``queue`` | ``running``, default ``kv``); ``capacity`` (number > 0,
default per load kind). Pure.
"""

from __future__ import annotations

from scheduler.plugins.scorers.placement import PlacementScorer, placement_factory

__all__ = ["SpreadScorer", "factory"]


class SpreadScorer(PlacementScorer):
    plugin_type = "spread-scorer"

    @staticmethod
    def score_loads(loads: list[float], capacity: float) -> list[float]:
        return [1.0 - min(max(load, 0.0), capacity) / capacity for load in loads]


factory = placement_factory(SpreadScorer)
