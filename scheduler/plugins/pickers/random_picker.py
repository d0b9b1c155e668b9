"""``random-picker``: ``maxNumOfEndpoints`` distinct endpoints chosen uniformly at random (scores ignored).

Randomness comes from the plugin's seeded source, so the same seed gives the same decision.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.pickers.common import PickerParams
from scheduler.types import LLMRequest, ScoredEndpoint

__all__ = ["RandomPicker", "factory"]


class RandomPicker(PluginBase):
    plugin_type = "random-picker"

    def __init__(self, name: str, params: PickerParams, rng: random.Random) -> None:
        super().__init__(name)
        self.params = params
        self._limit = params.max_num_of_endpoints
        self._rng = rng

    def pick(
        self, cycle: CycleState, request: LLMRequest, scored: Sequence[ScoredEndpoint]
    ) -> Sequence[ScoredEndpoint]:
        return self._rng.sample(list(scored), min(self._limit, len(scored)))


def _build(name: str, params: PickerParams, handle: Handle) -> RandomPicker:
    return RandomPicker(name, params, handle.rng(name))


factory = factory_with_params(RandomPicker.plugin_type, PickerParams, _build)
