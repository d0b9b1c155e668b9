"""``random-picker``: ``maxNumOfEndpoints`` distinct endpoints chosen uniformly at random (scores ignored).

Randomness comes from the plugin's seeded source, so the same seed gives the same decision.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.pickers.common import SeededPicker, picker_factory
from scheduler.types import LLMRequest, ScoredEndpoint

__all__ = ["RandomPicker", "factory"]


class RandomPicker(SeededPicker):
    plugin_type = "random-picker"

    def pick(
        self, cycle: CycleState, request: LLMRequest, scored: Sequence[ScoredEndpoint]
    ) -> Sequence[ScoredEndpoint]:
        return self._rng.sample(list(scored), min(self._limit, len(scored)))


factory = picker_factory(RandomPicker)
