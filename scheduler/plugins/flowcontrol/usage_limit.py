"""``static-usage-limit-policy`` (GIE's default usage-limit policy): one saturation ceiling for every
priority band. A band dispatches while the pool's saturation (the saturation detector's value) is
below ``threshold``.

Parameter: ``threshold`` (float >= 0, default 1.0: dispatch until the detector reports the pool
saturated, no extra gating).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.interfaces import Handle
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params

__all__ = ["StaticUsageLimit", "StaticUsageLimitParams", "factory"]


@dataclass(frozen=True, slots=True)
class StaticUsageLimitParams:
    threshold: float = param(1.0, ge=0)


class StaticUsageLimit(PluginBase):
    plugin_type = "static-usage-limit-policy"

    def __init__(self, name: str, params: StaticUsageLimitParams) -> None:
        super().__init__(name)
        self.params = params
        self._threshold = params.threshold

    def ceiling(self, saturation: float, priority: int) -> float:
        return self._threshold


def _build(name: str, params: StaticUsageLimitParams, handle: Handle) -> StaticUsageLimit:
    return StaticUsageLimit(name, params)


factory = factory_with_params(StaticUsageLimit.plugin_type, StaticUsageLimitParams, _build)
