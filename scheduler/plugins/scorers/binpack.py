"""``binpack-scorer`` (GPUStack placement policy): pack work onto the fullest endpoint that still fits.

Keeps the other endpoints cold (their caches stay warm for other work, and an autoscaler can shrink
the pool). With ``load`` and ``capacity`` as in :mod:`scheduler.plugins.scorers.placement`::

    score = load / capacity    if load < capacity     # fuller is better
    score = 0                  otherwise              # does not fit

Parameters: ``load`` (``kv`` | ``queue`` | ``running``, default ``kv``); ``capacity`` (number > 0,
default per load kind). Pure.
"""

from __future__ import annotations

from scheduler.plugins.scorers.placement import PlacementScorer, placement_factory

__all__ = ["BinpackScorer", "factory"]


class BinpackScorer(PlacementScorer):
    plugin_type = "binpack-scorer"

    @staticmethod
    def score_loads(loads: list[float], capacity: float) -> list[float]:
        return [load / capacity if 0.0 <= load < capacity else 0.0 for load in loads]


factory = placement_factory(BinpackScorer)
