"""What every picker shares: its parameters, its seeded random source, and its factory.

``maxNumOfEndpoints`` (int >= 1, default 1): how many distinct endpoints a picker returns at most
(the primary first, then fallbacks in order). Each picker draws randomness (tie-breaks, sampling)
only from the seeded source its :class:`~scheduler.interfaces.Handle` gives it, so the same seed gives
the same decision.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TypeVar

from scheduler.interfaces import Handle, PluginFactory
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params

__all__ = ["PickerParams", "SeededPicker", "picker_factory"]


@dataclass(frozen=True, slots=True)
class PickerParams:
    max_num_of_endpoints: int = param(1, ge=1)


class SeededPicker(PluginBase):
    """Base of the pickers: keeps the parameters, the endpoint limit and the seeded random source."""

    def __init__(self, name: str, params: PickerParams, rng: random.Random) -> None:
        super().__init__(name)
        self.params = params
        self._limit = params.max_num_of_endpoints
        self._rng = rng


P = TypeVar("P", bound=SeededPicker)


def picker_factory(cls: type[P]) -> PluginFactory:
    """The registry factory of picker class ``cls`` (parameters parsed, rng from the handle)."""

    def build(name: str, params: PickerParams, handle: Handle) -> P:
        return cls(name, params, handle.rng(name))

    return factory_with_params(cls.plugin_type, PickerParams, build)
