"""``max-score-picker``: the highest-scored endpoints, ties broken at random.

The candidates are shuffled with the plugin's seeded random source, then stably sorted by total score
(descending); the first ``maxNumOfEndpoints`` are returned. Equal scores therefore get a uniformly
random order, and the same seed gives the same decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from scheduler.cycle_state import CycleState
from scheduler.plugins.pickers.common import SeededPicker, picker_factory
from scheduler.types import LLMRequest, ScoredCandidates, ScoredEndpoint

__all__ = ["MaxScorePicker", "factory"]


_score = attrgetter("score")


class MaxScorePicker(SeededPicker):
    plugin_type = "max-score-picker"

    def pick(
        self, cycle: CycleState, request: LLMRequest, scored: Sequence[ScoredEndpoint]
    ) -> Sequence[ScoredEndpoint]:
        if self._limit == 1:
            # the totals, as the framework passes them (only the picked endpoint's object is built)
            totals = scored.totals if isinstance(scored, ScoredCandidates) else list(map(_score, scored))
            best = max(totals)
            if totals.count(best) == 1:
                return [scored[totals.index(best)]]
            return [scored[self._rng.choice([i for i, total in enumerate(totals) if total == best])]]
        items = list(scored)
        self._rng.shuffle(items)
        items.sort(key=_score, reverse=True)
        return items[: self._limit]


factory = picker_factory(MaxScorePicker)
