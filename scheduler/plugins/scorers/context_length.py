"""``context-length-aware`` (llm-d): route by the context-length range an endpoint is labelled for.

An endpoint's label ``label`` (default ``llm-d.ai/context-length-range``) holds ``"min-max"`` (two
integers, surrounding spaces allowed, ``min <= max``). The request's context length is the number of
token ids of the configured ``token-producer`` (0 when it produced none), else its prompt token
estimate (``token_estimate``, else characters / 4: llm-d-inference-scheduler's fallback when no
tokenizer ran); :class:`~scheduler.plugins.tokens.consumer.TokenCountReader`.

Score, for context length ``n``:

* no label: 0.5 (neutral); a label that does not parse: 0.0;
* ``min <= n <= max``: 1.0 when ``min == max``, else ``0.3 + 0.7 × (0.7 × w + 0.3 × h)`` with
  ``w = 1 / (1 + (max − min) / 10000)`` (narrow ranges win) and ``h = (max − n) / (max − min)``
  (headroom left): always in (0.3, 1];
* outside: ``0.3 / (1 + d / 1000)`` with ``d`` the distance to the nearest bound: in (0, 0.3).

As a filter (only with ``enableFiltering: true``; otherwise it keeps every endpoint): keeps the
endpoints without the label and those whose range contains ``n``; drops those whose label does
not parse. Parameters: ``label`` (non-empty), ``enableFiltering`` (default false).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle, Plugin
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.tokens.consumer import TokenCountReader
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "DEFAULT_LABEL",
    "ContextLengthAware",
    "ContextLengthParams",
    "factory",
    "parse_range",
    "range_score",
]

DEFAULT_LABEL = "llm-d.ai/context-length-range"
_INT = re.compile(r"^[+-]?[0-9]+$")
_FALLBACK = 0.3


def parse_range(text: str) -> tuple[int, int] | None:
    """``"min-max"`` -> (min, max); None when empty, malformed or min > max (Go's strconv.Atoi rules)."""
    bounds = text.split("-")
    if len(bounds) != 2:
        return None
    low, high = bounds[0].strip(), bounds[1].strip()
    if not _INT.match(low) or not _INT.match(high):
        return None
    lo, hi = int(low), int(high)
    return (lo, hi) if lo <= hi else None


def range_score(n: int, lo: int, hi: int) -> float:
    if lo <= n <= hi:
        width = hi - lo
        if width == 0:
            return 1.0
        raw = 0.7 * (1.0 / (1.0 + width / 10000.0)) + 0.3 * ((hi - n) / width)
        return _FALLBACK + raw * (1.0 - _FALLBACK)
    distance = n - hi if n > hi else lo - n
    return _FALLBACK / (1.0 + distance / 1000.0)


def _label(raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise ValueError("'label' must be specified")
    return raw


@dataclass(frozen=True, slots=True)
class ContextLengthParams:
    label: str = param(DEFAULT_LABEL, convert=_label, expect="a non-empty label key")
    enable_filtering: bool = False


class ContextLengthAware(TokenCountReader, PluginBase):
    plugin_type = "context-length-aware"

    def __init__(self, name: str, params: ContextLengthParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or ContextLengthParams()
        self._label = params.label
        self._filtering = params.enable_filtering

    def data_needs(self) -> tuple[DataNeed, ...]:
        return (self.token_need(),)

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        self.bind_tokens(key, producer)

    def _fits(self, n: int, endpoint: EndpointView) -> bool:
        text = endpoint.labels.get(self._label)
        if text is None:
            return True
        bounds = parse_range(text)
        return bounds is not None and bounds[0] <= n <= bounds[1]

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        if not self._filtering:
            return endpoints
        n = self.prompt_length(cycle, request)
        return [e for e in endpoints if self._fits(n, e)]

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        label = endpoint.labels.get(self._label)
        return f"context length {self.prompt_length(cycle, request)} outside {self._label}={label!r}"

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        n = self.prompt_length(cycle, request)
        out: list[float] = []
        for endpoint in endpoints:
            text = endpoint.labels.get(self._label)
            if text is None:
                out.append(0.5)
                continue
            bounds = parse_range(text)
            out.append(0.0 if bounds is None else range_score(n, *bounds))
        return out


def _build(name: str, params: ContextLengthParams, handle: Handle) -> ContextLengthAware:
    return ContextLengthAware(name, params)


factory = factory_with_params(ContextLengthAware.plugin_type, ContextLengthParams, _build)
