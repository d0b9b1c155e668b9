"""``lora-affinity-scorer``: prefer endpoints where the request's LoRA adapter is (or can be) loaded.

Inputs: ``request.adapter`` and each endpoint's ``running_adapters``, ``waiting_adapters`` and
``max_lora``. Score per endpoint, first rule that applies:

==========================================================  =====
request for a base model (``adapter`` is None)              1.0
adapter running on the endpoint                             1.0
free slot: ``len(running) + len(waiting) < max_lora``       0.8
adapter waiting on the endpoint                             0.6
otherwise (no slot; or ``max_lora`` unknown, i.e. 0)        0.0
==========================================================  =====

Parameters: none. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["FREE_SLOT_SCORE", "RUNNING_SCORE", "WAITING_SCORE", "LoraAffinityScorer", "factory"]

RUNNING_SCORE = 1.0
FREE_SLOT_SCORE = 0.8
WAITING_SCORE = 0.6


class LoraAffinityScorer(PluginBase):
    plugin_type = "lora-affinity-scorer"

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        adapter = request.adapter
        if adapter is None:
            return [1.0] * len(endpoints)
        out: list[float] = []
        append = out.append
        for endpoint in endpoints:
            m = endpoint.metrics
            running = m.running_adapters
            if adapter in running:
                append(RUNNING_SCORE)
                continue
            waiting = m.waiting_adapters
            if len(running) + len(waiting) < m.max_lora:
                append(FREE_SLOT_SCORE)
            elif adapter in waiting:
                append(WAITING_SCORE)
            else:
                append(0.0)
        return out


factory = factory_without_params(
    LoraAffinityScorer.plugin_type, lambda name, handle: LoraAffinityScorer(name)
)
