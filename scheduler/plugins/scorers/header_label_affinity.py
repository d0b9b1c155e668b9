"""``header-label-affinity-scorer`` (llm-d): prefer endpoints whose label equals a request header.

Score 1.0 for an endpoint whose label ``labelKey`` equals the value of request header
``headerName`` (exact, case-sensitive value), 0.0 for every other endpoint; all 0.0 when the header
is absent or empty. A soft preference: use one instance per header-to-label mapping, each with its
own weight. Parameters (both required): ``headerName`` (matched lower-cased), ``labelKey``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.params import REQUIRED, param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["HeaderLabelAffinityParams", "HeaderLabelAffinityScorer", "factory"]


def _non_empty(raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise ValueError("required")
    return raw


@dataclass(frozen=True, slots=True)
class HeaderLabelAffinityParams:
    header_name: str = param(REQUIRED, convert=_non_empty, expect="a non-empty header name")
    label_key: str = param(REQUIRED, convert=_non_empty, expect="a non-empty label key")


class HeaderLabelAffinityScorer(PluginBase):
    plugin_type = "header-label-affinity-scorer"

    def __init__(self, name: str, params: HeaderLabelAffinityParams) -> None:
        super().__init__(name)
        self.params = params
        self._header = params.header_name.lower()
        self._label = params.label_key

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        wanted = request.headers.get(self._header, "")
        if not wanted:
            return [0.0] * len(endpoints)
        label = self._label
        return [1.0 if e.labels.get(label) == wanted else 0.0 for e in endpoints]


def _build(name: str, params: HeaderLabelAffinityParams, handle: Handle) -> HeaderLabelAffinityScorer:
    return HeaderLabelAffinityScorer(name, params)


factory = factory_with_params(HeaderLabelAffinityScorer.plugin_type, HeaderLabelAffinityParams, _build)
