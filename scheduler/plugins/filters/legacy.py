"""Legacy GIE filters (before 2025-08, removed upstream in favour of scorers), for old configurations.

* ``least-queue-filter``: with ``lo``/``hi`` the smallest / largest waiting queue among the
  candidates, keeps ``q <= lo + (hi - lo) // n`` (the first of ``n`` equal bands). Parameters: none.
* ``least-kv-cache-filter``: the same with KV-cache usage, ``kv <= lo + (hi - lo) / n``.
  Parameters: none.
* ``low-queue-filter``: keeps ``waiting_queue_size <= threshold``. Parameters: ``threshold``
  (int >= 0, default 128, GIE's ``queueingThresholdLoRA``).
* ``lora-affinity-filter``: for an adapter request, splits the candidates into *affinity* (adapter
  running or waiting) and *available* (a free slot: ``running + waiting < max_lora``); returns the
  affinity group with probability ``threshold``, else the available group, whichever is non-empty
  (both empty: nothing, as in GIE). The draw is a seeded hash of the request id, so the filter is
  pure and reproducible. Base-model requests keep every endpoint. Parameters: ``threshold``
  (0 <= x <= 1, default 0.999).

``decision-tree-filter`` (nested filters wired by success / failure) is not provided. Order kept.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import xxhash

from scheduler.cycle_state import CycleState
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params, factory_without_params
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "LeastKvCacheFilter",
    "LeastQueueFilter",
    "LegacyLoraAffinityFilter",
    "LegacyLoraAffinityParams",
    "LowQueueFilter",
    "LowQueueParams",
    "least_kv_factory",
    "least_queue_factory",
    "lora_affinity_factory",
    "low_queue_factory",
]


class LeastQueueFilter(PluginBase):
    plugin_type = "least-queue-filter"

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        if not endpoints:
            return endpoints
        queues = [e.metrics.waiting_queue_size for e in endpoints]
        lo = min(queues)
        limit = lo + (max(queues) - lo) // len(queues)
        return [e for e, q in zip(endpoints, queues, strict=True) if q <= limit]

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return f"queue {endpoint.metrics.waiting_queue_size} not in the least-queued band"


class LeastKvCacheFilter(PluginBase):
    plugin_type = "least-kv-cache-filter"

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        if not endpoints:
            return endpoints
        usage = [e.metrics.kv_cache_usage for e in endpoints]
        lo = min(usage)
        limit = lo + (max(usage) - lo) / len(usage)
        return [e for e, kv in zip(endpoints, usage, strict=True) if kv <= limit]

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return f"KV cache usage {endpoint.metrics.kv_cache_usage:.2f} not in the least-used band"


@dataclass(frozen=True, slots=True)
class LowQueueParams:
    threshold: int = param(128, ge=0)


class LowQueueFilter(PluginBase):
    plugin_type = "low-queue-filter"

    def __init__(self, name: str, params: LowQueueParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or LowQueueParams()
        self._threshold = params.threshold

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        threshold = self._threshold
        return [e for e in endpoints if e.metrics.waiting_queue_size <= threshold]

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return f"queue {endpoint.metrics.waiting_queue_size} > {self._threshold}"


@dataclass(frozen=True, slots=True)
class LegacyLoraAffinityParams:
    threshold: float = param(0.999, ge=0, le=1)


class LegacyLoraAffinityFilter(PluginBase):
    plugin_type = "lora-affinity-filter"

    def __init__(self, name: str, rng: random.Random, params: LegacyLoraAffinityParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or LegacyLoraAffinityParams()
        self._threshold = params.threshold
        self._seed = rng.getrandbits(64)

    def prefers_affinity(self, request: LLMRequest) -> bool:
        draw = xxhash.xxh64_intdigest(request.request_id.encode(), self._seed) / float(2**64)
        return draw < self._threshold

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        adapter = request.adapter
        if adapter is None:
            return endpoints
        affinity: list[EndpointView] = []
        available: list[EndpointView] = []
        for e in endpoints:
            m = e.metrics
            if adapter in m.running_adapters or adapter in m.waiting_adapters:
                affinity.append(e)
            elif len(m.running_adapters) + len(m.waiting_adapters) < m.max_lora:
                available.append(e)
        if affinity and available:
            return affinity if self.prefers_affinity(request) else available
        return affinity or available

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return f"not in the chosen LoRA group for adapter {request.adapter!r}"


least_queue_factory = factory_without_params(LeastQueueFilter.plugin_type, lambda n, h: LeastQueueFilter(n))
least_kv_factory = factory_without_params(LeastKvCacheFilter.plugin_type, lambda n, h: LeastKvCacheFilter(n))
low_queue_factory = factory_with_params(
    LowQueueFilter.plugin_type, LowQueueParams, lambda name, params, handle: LowQueueFilter(name, params)
)
lora_affinity_factory = factory_with_params(
    LegacyLoraAffinityFilter.plugin_type,
    LegacyLoraAffinityParams,
    lambda name, params, handle: LegacyLoraAffinityFilter(name, handle.rng(name), params),
)
