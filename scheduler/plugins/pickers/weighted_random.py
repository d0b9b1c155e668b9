"""``weighted-random-picker``: weighted sampling without replacement (A-Res, Efraimidis-Spirakis).

Each candidate with score s > 0 draws U ~ Uniform(0, 1) and gets the key ``U ** (1 / s)``; the
``maxNumOfEndpoints`` largest keys win, in descending key order. The probability of being the primary
is proportional to the score. Candidates scoring 0 (or less) are excluded, unless every candidate scores
0, in which case the choice is uniform among all. Randomness comes from the plugin's seeded source.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.pickers.common import SeededPicker, picker_factory
from scheduler.types import LLMRequest, ScoredEndpoint

__all__ = ["WeightedRandomPicker", "factory"]


class WeightedRandomPicker(SeededPicker):
    plugin_type = "weighted-random-picker"

    def pick(
        self, cycle: CycleState, request: LLMRequest, scored: Sequence[ScoredEndpoint]
    ) -> Sequence[ScoredEndpoint]:
        limit = self._limit
        positive = [item for item in scored if item.score > 0.0]
        if not positive:
            return self._rng.sample(list(scored), min(limit, len(scored)))
        rand = self._rng.random
        keyed = [(rand() ** (1.0 / item.score), i) for i, item in enumerate(positive)]
        keyed.sort(reverse=True)
        return [positive[i] for _, i in keyed[:limit]]


factory = picker_factory(WeightedRandomPicker)
