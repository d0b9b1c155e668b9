"""``by-label`` (llm-d): keep endpoints whose value of one label is in a list of valid values.

An endpoint passes when it has label ``label`` with a value in ``validValues``, or when it has no
such label and ``allowsNoLabel`` is true. (llm-d reads a missing label as the empty string, so
listing ``""`` in ``validValues`` also admitted unlabeled endpoints there; here only
``allowsNoLabel`` does, and ``""`` matches a label that is present and empty.)

Parameters: ``label`` (required, a qualified label key), ``validValues`` (list of strings, default
empty), ``allowsNoLabel`` (bool, default false). Pure; order kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.params import REQUIRED, param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.shared.selector import check_key
from scheduler.types import EndpointView, LLMRequest

__all__ = ["ByLabelFilter", "ByLabelParams", "factory", "keep_by_label", "label_mismatch"]


def keep_by_label(
    endpoints: Sequence[EndpointView], key: str, values: frozenset[str], allow_missing: bool
) -> list[EndpointView]:
    """The endpoints whose label ``key`` has a value in ``values`` (or is absent, with ``allow_missing``).

    Order kept; shared with the role filters (:mod:`scheduler.plugins.filters.roles`).
    """
    out = []
    for e in endpoints:
        value = e.labels.get(key)
        if (value is None and allow_missing) or value in values:
            out.append(e)
    return out


def label_mismatch(endpoint: EndpointView, key: str, values: frozenset[str]) -> str:
    """Why :func:`keep_by_label` dropped ``endpoint`` (for decision records)."""
    value = endpoint.labels.get(key)
    if value is None:
        return f"no {key} label"
    return f"{key}={value} is not one of {', '.join(sorted(values)) or '(none)'}"


def _label_key(raw: object) -> str:
    return check_key(raw, "label")


@dataclass(frozen=True, slots=True)
class ByLabelParams:
    label: str = param(REQUIRED, convert=_label_key, expect="a label key such as llm-d.ai/role")
    valid_values: tuple[str, ...] = ()
    allows_no_label: bool = False


class ByLabelFilter(PluginBase):
    plugin_type = "by-label"

    def __init__(self, name: str, params: ByLabelParams) -> None:
        super().__init__(name)
        self.params = params
        self._key = params.label
        self._values = frozenset(params.valid_values)
        self._allow_missing = params.allows_no_label

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        return keep_by_label(endpoints, self._key, self._values, self._allow_missing)

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return label_mismatch(endpoint, self._key, self._values)


factory = factory_with_params(
    ByLabelFilter.plugin_type, ByLabelParams, lambda name, params, handle: ByLabelFilter(name, params)
)
