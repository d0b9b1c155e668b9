"""``endpoint-attribute-scorer`` (llm-d): score endpoints by a scalar attribute from the data layer.

Reads the scalar ``attributeKey`` (from ``producer``, default ``core-metrics-extractor``; see
:mod:`scheduler.plugins.attributes`) of each endpoint. ``algorithm.type``:
``linear_lower_is_better`` or ``linear_higher_is_better``. Normalisation
(``algorithm.normalization``, at most one):

* ``adaptiveRange: {}`` (default): min-max over the candidates that have the attribute:
  ``(v − min) / (max − min)``; all equal → 1.0;
* ``fixedRange: {min, max}`` (``min < max``): ``(v − min) / (max − min)`` clamped to [0, 1].

Lower-is-better scores ``1 − normalised``. An endpoint without the attribute scores 0.0. The
plugin logs at start which attribute it reads (nothing here publishes one unless a data-layer
extractor does: without it every endpoint scores 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.params import REQUIRED, param
from scheduler.plugins.attributes import log_attribute_source, read_scalar, resolve_attribute
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["EndpointAttributeScorer", "EndpointAttributeScorerParams", "factory"]

LOWER = "linear_lower_is_better"
HIGHER = "linear_higher_is_better"


def _algorithm(raw: Any) -> tuple[bool, tuple[float, float] | None]:
    """-> (lower_is_better, fixed range or None for adaptive)."""
    if not isinstance(raw, Mapping) or set(raw) - {"type", "normalization"}:
        raise ValueError("expected {type, normalization}")
    kind = raw.get("type")
    if kind not in (LOWER, HIGHER):
        raise ValueError(f"algorithm.type must be {LOWER!r} or {HIGHER!r}, got {kind!r}")
    norm = raw.get("normalization") or {}
    if not isinstance(norm, Mapping) or set(norm) - {"fixedRange", "adaptiveRange"}:
        raise ValueError("algorithm.normalization: expected {fixedRange} or {adaptiveRange}")
    fixed, adaptive = norm.get("fixedRange"), norm.get("adaptiveRange")
    if fixed is not None and adaptive is not None:
        raise ValueError("at most one normalization strategy, got both fixedRange and adaptiveRange")
    if adaptive is not None and adaptive != {}:
        raise ValueError("algorithm.normalization.adaptiveRange takes no fields")
    bounds = None
    if fixed is not None:
        if not isinstance(fixed, Mapping) or set(fixed) - {"min", "max"}:
            raise ValueError("algorithm.normalization.fixedRange: expected {min, max}")
        lo, hi = fixed.get("min", 0), fixed.get("max", 0)
        if any(isinstance(v, bool) or not isinstance(v, int | float) for v in (lo, hi)):
            raise ValueError("algorithm.normalization.fixedRange: min and max must be numbers")
        if lo >= hi:
            raise ValueError(f"normalization.fixedRange requires min < max, got min {lo}, max {hi}")
        bounds = (float(lo), float(hi))
    return kind == LOWER, bounds


def _render_algorithm(value: tuple[bool, tuple[float, float] | None]) -> dict[str, Any]:
    lower, bounds = value
    norm: dict[str, Any] = {"adaptiveRange": {}}
    if bounds is not None:
        norm = {"fixedRange": {"min": bounds[0], "max": bounds[1]}}
    return {"type": LOWER if lower else HIGHER, "normalization": norm}


def _attribute(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise ValueError("requires a non-empty attributeKey")
    return raw


@dataclass(frozen=True, slots=True)
class EndpointAttributeScorerParams:
    attribute_key: str = param(REQUIRED, convert=_attribute, expect="a non-empty attribute name")
    algorithm: tuple[bool, tuple[float, float] | None] = param(
        REQUIRED,
        convert=_algorithm,
        expect="{type: linear_lower_is_better | linear_higher_is_better, ...}",
        render=_render_algorithm,
    )
    producer: str | None = None

    def __post_init__(self) -> None:
        resolve_attribute(self.attribute_key, self.producer)


class EndpointAttributeScorer(PluginBase):
    plugin_type = "endpoint-attribute-scorer"

    def __init__(self, name: str, params: EndpointAttributeScorerParams) -> None:
        super().__init__(name)
        self.params = params
        self.key = resolve_attribute(params.attribute_key, params.producer)
        self._lower, self._fixed = params.algorithm

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        values = [read_scalar(e, self.key) for e in endpoints]
        if self._fixed is not None:
            lo, hi = self._fixed
        else:
            present = [v for v in values if v is not None]
            if not present:
                return [0.0] * len(endpoints)
            lo, hi = min(present), max(present)
            if lo == hi:
                return [0.0 if v is None else 1.0 for v in values]
        out: list[float] = []
        for v in values:
            if v is None:
                out.append(0.0)
                continue
            norm = min(1.0, max(0.0, (v - lo) / (hi - lo)))
            out.append(1.0 - norm if self._lower else norm)
        return out


def _build(name: str, params: EndpointAttributeScorerParams, handle: Handle) -> EndpointAttributeScorer:
    scorer = EndpointAttributeScorer(name, params)
    log_attribute_source(scorer.plugin_type, name, scorer.key, "score 0")
    return scorer


factory = factory_with_params(EndpointAttributeScorer.plugin_type, EndpointAttributeScorerParams, _build)
