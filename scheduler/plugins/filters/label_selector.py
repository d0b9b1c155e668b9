"""``label-selector-filter``: keep endpoints whose labels match a Kubernetes label selector.

The plugin's ``parameters`` are the selector itself, exactly as in Kubernetes manifests::

    - type: label-selector-filter
      parameters:
        matchLabels: {accelerator: h100}
        matchExpressions:
        - {key: llm-d.ai/role, operator: In, values: [decode, both]}
        - {key: canary, operator: DoesNotExist}

Semantics and validation are those of :mod:`scheduler.plugins.shared.selector` (Kubernetes'
``LabelSelectorAsSelector``): an invalid key, value or operator, values given to Exists /
DoesNotExist or missing for In / NotIn fail at startup with a ConfigError naming the plugin and the
field. No parameters (or an empty selector) keeps every endpoint. Pure; order preserved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin
from scheduler.params import parse_params, plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.shared.selector import LabelSelector, parse_selector
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "ByLabelSelectorFilter",
    "LabelSelectorFilter",
    "LabelSelectorParams",
    "by_label_selector_factory",
    "factory",
]


@dataclass(frozen=True, slots=True)
class LabelSelectorParams:
    match_labels: Any | None = None  # validated by parse_selector
    match_expressions: Any | None = None


class LabelSelectorFilter(PluginBase):
    plugin_type = "label-selector-filter"

    def __init__(self, name: str, selector: LabelSelector, params: LabelSelectorParams | None = None) -> None:
        super().__init__(name)
        self.params = params or LabelSelectorParams()
        self.selector = selector

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        if not self.selector.requirements:
            return endpoints
        matches = self.selector.matches
        return [e for e in endpoints if matches(e.labels)]

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        unmet = self.selector.first_unmet(endpoint.labels)
        return f"labels do not match selector requirement {unmet}" if unmet else "labels do not match"


class ByLabelSelectorFilter(LabelSelectorFilter):
    plugin_type = "by-label-selector"


def _build(cls: type[LabelSelectorFilter], name: str, parameters: Any) -> Plugin:
    params = parse_params(LabelSelectorParams, parameters, cls.plugin_type, name)
    try:
        selector = parse_selector(params.match_labels, params.match_expressions)
    except ValueError as exc:
        raise ConfigError(
            str(exc), location=f"{plugin_location(cls.plugin_type, name)}: parameters"
        ) from None
    return cls(name, selector, params)


def factory(name: str, parameters: Any, handle: Handle) -> Plugin:
    return _build(LabelSelectorFilter, name, parameters)


def by_label_selector_factory(name: str, parameters: Any, handle: Handle) -> Plugin:
    return _build(ByLabelSelectorFilter, name, parameters)
