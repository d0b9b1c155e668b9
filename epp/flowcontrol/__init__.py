"""Flow control (GIE's ``flowControl`` feature gate): request queueing with priority bands, per-tenant
fairness and capacity limits, in front of the scheduler.

:mod:`.config` (the section's schema, defaults, policy references), :mod:`.queues` (the bands, flows and
queues; sans I/O), :mod:`.controller` (admission, dispatch passes, TTL, shutdown on the event loop),
:mod:`.metrics` (upstream's metric families). The policies are plugins of the scheduler's registry
(:mod:`scheduler.plugins.flowcontrol`). See docs/flow-control.md.
"""

from epp.flowcontrol.config import (
    FlowControlConfig,
    FlowControlSpec,
    parse_flow_control,
    resolve_flow_control,
)
from epp.flowcontrol.controller import FlowController, Ticket

__all__ = [
    "FlowControlConfig",
    "FlowControlSpec",
    "FlowController",
    "Ticket",
    "parse_flow_control",
    "resolve_flow_control",
]
