"""Usage-limit policies: the saturation ceiling under which each priority band may dispatch.

Each takes the pool's saturation (the saturation detector's value) and the provisioned priority levels,
highest first (upstream's ``AllOrderedPriorityLevels``: the flow controller's
:mod:`epp.flowcontrol.levels`, not only the bands holding requests), and returns one ceiling per
level; the flow controller dispatches from a band while ``saturation < ceiling`` and stops at the
first band that is gated.

* ``static-usage-limit-policy`` (GIE's default): the same ceiling for every band. Parameter
  ``threshold`` (float >= 0, default 1.0: dispatch until the detector reports the pool saturated).
* ``priority-holdback-policy`` (llm-d-router): ceilings spread linearly from ``maxCeiling`` (highest
  band, default 1.0, in (0, 1]) down to ``minCeiling`` (lowest band, required, in [0, 1), below
  ``maxCeiling``), by rank (``domain: rank``, the default: ``c_i = max - i (max - min) / (N - 1)``)
  or by priority value (``domain: value``: ``c_i = min + (p_i - p_min) / (p_max - p_min) (max - min)``);
  ``shape``:
  ``linear`` (the only one). One band: ``maxCeiling``.
* ``soft-reflective-ceiling-policy`` (llm-d-router, no parameters): the highest band gets 1.0; band
  ``i`` of ``N`` gets its reflective ceiling ``1 - i * saturation / (N - 1)``: open (1.0) while the
  saturation is below it, closed (0.0) at saturation >= 1, otherwise open on one decision in
  ``round(saturation / (1 - saturation))`` (a counter shared by the bands), so a lower band's dispatch
  rate falls continuously as the pool fills.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.errors import ConfigError
from scheduler.interfaces import Handle
from scheduler.params import param, plugin_location
from scheduler.plugins.base import PluginBase, factory_with_params, factory_without_params

__all__ = [
    "PriorityHoldback",
    "PriorityHoldbackParams",
    "SoftReflectiveCeiling",
    "StaticUsageLimit",
    "StaticUsageLimitParams",
    "factory",
    "priority_holdback_factory",
    "soft_reflective_factory",
]


@dataclass(frozen=True, slots=True)
class StaticUsageLimitParams:
    threshold: float = param(1.0, ge=0)


class StaticUsageLimit(PluginBase):
    plugin_type = "static-usage-limit-policy"

    def __init__(self, name: str, params: StaticUsageLimitParams) -> None:
        super().__init__(name)
        self.params = params
        self._threshold = params.threshold

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        return [self._threshold] * len(priorities)


@dataclass(frozen=True, slots=True)
class PriorityHoldbackParams:
    min_ceiling: float = param(ge=0, lt=1)
    max_ceiling: float = param(1.0, gt=0, le=1)
    shape: str = param("linear", choices=("linear",))
    domain: str = param("rank", choices=("rank", "value"))


class PriorityHoldback(PluginBase):
    plugin_type = "priority-holdback-policy"

    def __init__(self, name: str, params: PriorityHoldbackParams) -> None:
        super().__init__(name)
        self.params = params
        self._lo, self._hi, self._rank = params.min_ceiling, params.max_ceiling, params.domain == "rank"

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        lo, hi = self._lo, self._hi
        n = len(priorities)
        if n <= 1:
            return [hi] * n
        if self._rank:
            return [hi - i * (hi - lo) / (n - 1) for i in range(n)]
        p_min, p_max = min(priorities), max(priorities)
        if p_max == p_min:
            return [hi] * n
        return [lo + (p - p_min) / (p_max - p_min) * (hi - lo) for p in priorities]


class SoftReflectiveCeiling(PluginBase):
    plugin_type = "soft-reflective-ceiling-policy"

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._tick = 0

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        n = len(priorities)
        if n <= 1:
            return [1.0] * n
        open_ = False
        if 1.0 - saturation <= saturation < 1.0:  # some band is past its reflective ceiling
            period = max(1, round(saturation / (1.0 - saturation + 1e-9)))
            self._tick += 1
            open_ = self._tick % period == 0
        out = [1.0]
        for i in range(1, n):
            if saturation < 1.0 - i * saturation / (n - 1):
                out.append(1.0)
            elif saturation >= 1.0:
                out.append(0.0)
            else:
                out.append(1.0 if open_ else 0.0)
        return out


def _build(name: str, params: StaticUsageLimitParams, handle: Handle) -> StaticUsageLimit:
    return StaticUsageLimit(name, params)


def _holdback(name: str, params: PriorityHoldbackParams, handle: Handle) -> PriorityHoldback:
    if params.min_ceiling >= params.max_ceiling:
        raise ConfigError(
            f"must be less than maxCeiling ({params.max_ceiling}), got {params.min_ceiling}",
            location=f"{plugin_location(PriorityHoldback.plugin_type, name)}: parameters.minCeiling",
        )
    return PriorityHoldback(name, params)


def _soft(name: str, handle: Handle) -> SoftReflectiveCeiling:
    return SoftReflectiveCeiling(name)


factory = factory_with_params(StaticUsageLimit.plugin_type, StaticUsageLimitParams, _build)
priority_holdback_factory = factory_with_params(
    PriorityHoldback.plugin_type, PriorityHoldbackParams, _holdback
)
soft_reflective_factory = factory_without_params(SoftReflectiveCeiling.plugin_type, _soft)
