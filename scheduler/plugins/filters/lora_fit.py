"""``lora-fit-filter`` (GPUStack resource-fit policy): keep endpoints that can serve the adapter now.

For a request with ``request.adapter`` set, an endpoint fits when the adapter is running on it, or
when it has a free LoRA slot: ``len(running_adapters) + len(waiting_adapters) < max_lora``. An
endpoint with the adapter only waiting (queued for loading) does not fit unless a slot is free.

Fallback: when no endpoint fits, every endpoint is kept (the adapter will have to be swapped in
somewhere; leave that choice to the scorers, e.g. ``lora-affinity-scorer``). Requests for a base
model keep every endpoint. Parameters: none. Pure; order kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["LoraFitFilter", "factory", "fits"]


def fits(endpoint: EndpointView, adapter: str) -> bool:
    m = endpoint.metrics
    running = m.running_adapters
    return adapter in running or len(running) + len(m.waiting_adapters) < m.max_lora


class LoraFitFilter(PluginBase):
    plugin_type = "lora-fit-filter"

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        adapter = request.adapter
        if adapter is None:
            return endpoints
        kept = [e for e in endpoints if fits(e, adapter)]
        return kept or endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        m = endpoint.metrics
        used = len(m.running_adapters) + len(m.waiting_adapters)
        return f"adapter {request.adapter!r} not loaded and no free LoRA slot ({used}/{m.max_lora} used)"


factory = factory_without_params(LoraFitFilter.plugin_type, lambda name, handle: LoraFitFilter(name))
