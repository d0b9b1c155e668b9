"""``lora-affinity-scorer``: prefer endpoints where the request's LoRA adapter is (or can be) loaded.

Inputs: the model looked up, ``request.adapter`` when set, else ``request.target_model`` (as GIE, which
looks the target model up among the adapters: the EPP does not know which names are base models), and
each endpoint's ``running_adapters``, ``waiting_adapters`` and ``max_lora``. Score per endpoint, first
rule that applies:

==========================================================  =====
no model at all (header-only / passthrough request)         1.0
model running on the endpoint as an adapter                 1.0
free slot: ``len(running) + len(waiting) < max_lora``       0.8
model waiting on the endpoint                               0.6
otherwise (no slot; or ``max_lora`` unknown, i.e. 0)        0.0
==========================================================  =====

A base-model request thus scores like an adapter that is not loaded: the same on every endpoint of a
pool without LoRA, higher on endpoints with a free slot otherwise (GIE's behaviour). Parameters: none.
Pure.
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
        adapter = request.adapter if request.adapter is not None else request.target_model
        if not adapter:
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
