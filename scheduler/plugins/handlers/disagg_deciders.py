"""P/D deciders: whether a request should run a separate prefill step (``disagg-profile-handler``).

A decider is a plugin implementing :class:`PDDecider`, referenced by name from the handler's
``prefillDeciderPluginName``. It is called once per request, after the decode profile chose its
endpoint, and must be pure.

* ``always-disagg-pd-decider``: always true. Parameters: none.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Plugin
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["AlwaysDisaggDecider", "PDDecider", "always_factory"]


@runtime_checkable
class PDDecider(Plugin, Protocol):
    def should_disaggregate(self, cycle: CycleState, request: LLMRequest, decode: EndpointView) -> bool:
        """True when the prefill profile should run for ``request`` routed to ``decode``. Pure."""
        ...


class AlwaysDisaggDecider(PluginBase):
    plugin_type = "always-disagg-pd-decider"

    def should_disaggregate(self, cycle: CycleState, request: LLMRequest, decode: EndpointView) -> bool:
        return True


always_factory = factory_without_params(
    AlwaysDisaggDecider.plugin_type, lambda name, handle: AlwaysDisaggDecider(name)
)
