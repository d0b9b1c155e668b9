"""``max-score-picker``: the highest-scored endpoints, ties broken at random.

The candidates are shuffled with the plugin's seeded random source, then stably sorted by total score
(descending); the first ``maxNumOfEndpoints`` are returned. Equal scores therefore get a uniformly
random order, and the same seed gives the same decision.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.pickers.common import SeededPicker, picker_factory
from scheduler.types import LLMRequest, ScoredEndpoint

__all__ = ["MaxScorePicker", "factory"]


def _score(item: ScoredEndpoint) -> float:
    return item.score


class MaxScorePicker(SeededPicker):
    plugin_type = "max-score-picker"

    def pick(
        self, cycle: CycleState, request: LLMRequest, scored: Sequence[ScoredEndpoint]
    ) -> Sequence[ScoredEndpoint]:
        if self._limit == 1:
            best = max(item.score for item in scored)
            top = [item for item in scored if item.score == best]
            return [top[0] if len(top) == 1 else self._rng.choice(top)]
        items = list(scored)
        self._rng.shuffle(items)
        items.sort(key=_score, reverse=True)
        return items[: self._limit]


factory = picker_factory(MaxScorePicker)
