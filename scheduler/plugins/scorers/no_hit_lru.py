"""``no-hit-lru-scorer`` (llm-d): spread cold requests over the least recently used endpoints.

A request is *cold* when the cycle's prefix match (:func:`scheduler.plugins.prefix.match.prefix_match`,
published by ``prefix-cache-scorer``) shows no endpoint holding any of its blocks, or when no prefix
match exists. Cold requests create new KV blocks wherever they land, so sending them to the endpoint
that least recently received a cold request spreads cache growth evenly.

Score for a cold request over ``n`` candidates: candidates are ranked, never-used first (in input
order), then by the time of their last cold request, oldest first; ``score = 1 - rank / (n - 1)``
(a single candidate scores 1.0). Requests with a prefix hit score a neutral 0.5 everywhere, leaving
the choice to the other scorers.

State: an LRU of endpoint addresses (at most ``lruSize``), updated by ``on_dispatched`` for cold
requests only, with the primary endpoint and the prefill endpoint of the ``prefillProfile`` result.
``score`` remembers which request ids were cold (a bounded map, read once by ``on_dispatched``);
this does not affect any score, so scoring stays deterministic.

Parameters: ``lruSize`` (int >= 1, default 1024), ``prefillProfile`` (default ``"prefill"``),
``prefixMatchInfoProducerName`` (llm-d-router's; the producer whose match decides coldness, see
:mod:`scheduler.producers`: "" reads ``approx-prefix-cache-producer``, injected under
``llm-d.ai/v1alpha1`` when not configured, unless a ``prefix-cache-scorer`` with its own index is;
without a producer the cycle's published match is read), ``prefixPluginName`` (llm-d's older form;
when given it must name a ``prefix-cache-scorer`` declared in ``plugins``, and the cycle's published
match is read: that of the first prefix-cache-scorer, the named one whenever there is only one).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin
from scheduler.params import param, parse_params, plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.prefix.consumer import PrefixMatchConsumer
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = ["NoHitLruParams", "NoHitLruScorer", "factory"]

NEUTRAL = 0.5
_COLD_LIMIT = 4096  # cold request ids kept between score and on_dispatched


@dataclass(frozen=True, slots=True)
class NoHitLruParams:
    lru_size: int = param(1024, ge=1, key="lruSize")
    prefill_profile: str = "prefill"
    prefix_plugin_name: str | None = None
    prefix_match_info_producer_name: str = ""

    def __post_init__(self) -> None:
        if self.prefix_plugin_name is not None and self.prefix_match_info_producer_name:
            raise ValueError("give prefixMatchInfoProducerName or the older prefixPluginName, not both")


class NoHitLruScorer(PrefixMatchConsumer, PluginBase):
    plugin_type = "no-hit-lru-scorer"

    params: NoHitLruParams

    def __init__(self, name: str, params: NoHitLruParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or NoHitLruParams()
        self._size = params.lru_size
        self._prefill = params.prefill_profile
        self._clock = 0
        self._last_used: OrderedDict[str, int] = OrderedDict()  # oldest first
        self._cold: dict[str, None] = {}
        self.producer_name = params.prefix_match_info_producer_name
        self.uses_producer = params.prefix_plugin_name is None

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        match = self.prefix_match_for(cycle, request)
        if match is not None and any(match.matched.values()):
            return [NEUTRAL] * len(endpoints)
        self._remember_cold(request.request_id)
        n = len(endpoints)
        if n <= 1:
            return [1.0] * n
        last_used = self._last_used
        order = sorted(range(n), key=lambda i: last_used.get(endpoints[i].address, -1))  # stable
        scores = [0.0] * n
        step = 1.0 / (n - 1)
        for rank, i in enumerate(order):
            scores[i] = 1.0 - rank * step
        return scores

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        if request.request_id not in self._cold:
            return
        del self._cold[request.request_id]
        if result.endpoints:
            self._touch(result.endpoints[0].address)
        prefill = result.profile_results.get(self._prefill)
        if prefill is not None and prefill.targets and self._prefill != result.primary_profile:
            self._touch(prefill.targets[0].endpoint.address)

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        for address in addresses:
            self._last_used.pop(address, None)

    def _remember_cold(self, request_id: str) -> None:
        if len(self._cold) >= _COLD_LIMIT:
            self._cold.pop(next(iter(self._cold)))
        self._cold[request_id] = None

    def _touch(self, address: str) -> None:
        self._clock += 1
        self._last_used[address] = self._clock
        self._last_used.move_to_end(address)
        if len(self._last_used) > self._size:
            self._last_used.popitem(last=False)


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    plugin_type = NoHitLruScorer.plugin_type
    params = parse_params(NoHitLruParams, parameters, plugin_type, name)
    ref = params.prefix_plugin_name
    if ref is not None:
        where = f"{plugin_location(plugin_type, name)}: parameters.prefixPluginName"
        try:
            target = handle.plugin(ref)
        except KeyError:
            raise ConfigError(
                f"no plugin named {ref!r}: expected a prefix-cache-scorer declared in plugins",
                location=where,
            ) from None
        if target.plugin_type != "prefix-cache-scorer":
            raise ConfigError(
                f"plugin {ref!r} is a {target.plugin_type}, not a prefix-cache-scorer", location=where
            )
    return NoHitLruScorer(name, params)
