"""``endpoint-attribute-filter`` (llm-d): keep endpoints whose scalar attribute passes a threshold.

Reads the scalar ``attribute`` (from ``producer``, default ``core-metrics-extractor``; see
:mod:`scheduler.plugins.attributes`) of each endpoint and keeps it when ``value <operator> value``
holds (``algorithm: {type: threshold, threshold: {operator, value}}``; operators ``LessThan``,
``LessThanOrEqual``, ``GreaterThan``, ``GreaterThanOrEqual``, ``Equal``, ``NotEqual``). An endpoint
without the attribute is kept with ``onMissing: Pass`` (default) and dropped with ``Fail``. If
nothing is left and ``fallbackOnEmpty`` is true (default false), every candidate is kept. The
plugin logs at start which attribute it reads.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.params import REQUIRED, param
from scheduler.plugins.attributes import log_attribute_source, read_scalar, resolve_attribute
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["OPERATORS", "EndpointAttributeFilter", "EndpointAttributeFilterParams", "factory"]

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "LessThan": operator.lt,
    "LessThanOrEqual": operator.le,
    "GreaterThan": operator.gt,
    "GreaterThanOrEqual": operator.ge,
    "Equal": operator.eq,
    "NotEqual": operator.ne,
}


def _algorithm(raw: Any) -> tuple[str, float]:
    if not isinstance(raw, Mapping) or set(raw) - {"type", "threshold"}:
        raise ValueError("expected {type: threshold, threshold: {operator, value}}")
    if raw.get("type") != "threshold":
        raise ValueError(f"algorithm.type must be 'threshold', got {raw.get('type')!r}")
    threshold = raw.get("threshold")
    if threshold is None:
        raise ValueError("algorithm.threshold is required when algorithm.type is 'threshold'")
    if not isinstance(threshold, Mapping) or set(threshold) - {"operator", "value"}:
        raise ValueError("algorithm.threshold: expected {operator, value}")
    op, value = threshold.get("operator"), threshold.get("value", 0)
    if op not in OPERATORS:
        raise ValueError(f"threshold.operator must be one of {', '.join(OPERATORS)}, got {op!r}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"threshold.value must be a number, got {value!r}")
    return op, float(value)


def _render_algorithm(value: tuple[str, float]) -> dict[str, Any]:
    op, threshold = value
    return {"type": "threshold", "threshold": {"operator": op, "value": threshold}}


def _attribute(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise ValueError("requires a non-empty attribute")
    return raw


@dataclass(frozen=True, slots=True)
class EndpointAttributeFilterParams:
    attribute: str = param(REQUIRED, convert=_attribute, expect="a non-empty attribute name")
    algorithm: tuple[str, float] = param(
        REQUIRED,
        convert=_algorithm,
        expect="{type: threshold, threshold: {operator, value}}",
        render=_render_algorithm,
    )
    producer: str | None = None
    on_missing: str = param("Pass", choices=("Pass", "Fail"))
    fallback_on_empty: bool = False

    def __post_init__(self) -> None:
        resolve_attribute(self.attribute, self.producer)


class EndpointAttributeFilter(PluginBase):
    plugin_type = "endpoint-attribute-filter"

    def __init__(self, name: str, params: EndpointAttributeFilterParams) -> None:
        super().__init__(name)
        self.params = params
        self.key = resolve_attribute(params.attribute, params.producer)
        self._pass_missing = params.on_missing == "Pass"
        self._fallback = params.fallback_on_empty
        self._op_name, self._value = params.algorithm
        self._op = OPERATORS[self._op_name]

    def _keeps(self, endpoint: EndpointView) -> bool:
        value = read_scalar(endpoint, self.key)
        return self._pass_missing if value is None else self._op(value, self._value)

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        kept = [e for e in endpoints if self._keeps(e)]
        if not kept and self._fallback:
            return endpoints
        return kept

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        value = read_scalar(endpoint, self.key)
        if value is None:
            return f"attribute {self.key} missing (onMissing: Fail)"
        return f"attribute {self.key} = {value:g} fails {self._op_name} {self._value:g}"


def _build(name: str, params: EndpointAttributeFilterParams, handle: Handle) -> EndpointAttributeFilter:
    plugin = EndpointAttributeFilter(name, params)
    log_attribute_source(
        plugin.plugin_type, name, plugin.key, "are " + ("kept" if params.on_missing == "Pass" else "dropped")
    )
    return plugin


factory = factory_with_params(EndpointAttributeFilter.plugin_type, EndpointAttributeFilterParams, _build)
