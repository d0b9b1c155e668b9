"""``disagg-profile-handler`` (llm-d): prefill/decode disaggregation.

Profile runs, in order:

1. the decode profile (always), plus any shadow profiles (observation only);
2. if decode found an endpoint, and the prefill profile is configured, and the decider says so for
   the chosen decode endpoint: the prefill profile.

Result: the primary profile is the decode profile (its targets are the routed endpoints). When the
prefill profile ran and found an endpoint, header ``x-prefiller-host-port: <prefill ip:port>`` tells
the decode server's sidecar where to run prefill (llm-d convention). A failed prefill run falls back
to decode-only (no header) instead of failing the request; a failed decode run raises
NoEndpointError.

Data parallelism (``primaryPort``): when set, every decode target is rewritten to that port (the
rank-0 server of a data-parallel group) and the originally chosen ``ip:port`` goes in header
``x-data-parallel-host-port``, as llm-d does.

Parameters: see :mod:`scheduler.plugins.handlers.disagg_params` (llm-d's nested ``profiles`` /
``deciders`` form and its deprecated flat form). The decider is a plugin declared anywhere in
``plugins`` (created first, as upstream orders plugins by their references); without one the
prefill stage never runs (llm-d's behaviour: P/D disabled), and a configuration that names a
decider but has no prefill profile routes decode-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError, NoEndpointError
from scheduler.interfaces import Handle, PDDecider, Plugin
from scheduler.params import parse_params, plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.handlers.disagg_params import DisaggParams
from scheduler.profile import SchedulerProfile
from scheduler.types import Endpoint, EndpointView, LLMRequest, ProfileResult, SchedulingResult

__all__ = ["DATA_PARALLEL_HEADER", "PREFILLER_HEADER", "DisaggProfileHandler", "factory"]

PLUGIN_TYPE = "disagg-profile-handler"
PREFILLER_HEADER = "x-prefiller-host-port"
DATA_PARALLEL_HEADER = "x-data-parallel-host-port"


def _with_port(endpoint: EndpointView, port: int) -> EndpointView:
    host = endpoint.address.rpartition(":")[0] or endpoint.address
    return Endpoint(
        address=f"{host}:{port}",
        name=endpoint.name,
        labels=endpoint.labels,
        ready=endpoint.ready,
        metrics=endpoint.metrics,
        attributes=endpoint.attributes,
    )


class DisaggProfileHandler(PluginBase):
    plugin_type = PLUGIN_TYPE

    def __init__(self, name: str, decider: PDDecider | None, params: DisaggParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or DisaggParams()
        self.decider = decider
        self._decode = params.decode
        self._prefill = params.prefill
        self._primary_port = params.primary_port

    def pick_profiles(
        self,
        cycle: CycleState,
        request: LLMRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileResult | None],
    ) -> Mapping[str, SchedulerProfile]:
        if self._decode not in results:
            decode = profiles.get(self._decode)
            if decode is None:
                return {}  # process_results reports the missing profile
            first = {n: p for n, p in profiles.items() if p.shadow and n not in results}
            first[self._decode] = decode
            return first
        if self._prefill in results:
            return {}
        decode_result = results[self._decode]
        prefill = profiles.get(self._prefill)
        if decode_result is None or not decode_result.targets or prefill is None or self.decider is None:
            return {}
        if self.decider.should_disaggregate(cycle, request, decode_result.targets[0].endpoint):
            return {self._prefill: prefill}
        return {}

    def process_results(
        self, cycle: CycleState, request: LLMRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        if self._decode not in results:
            raise NoEndpointError(f'decode profile "{self._decode}" is not configured or was not run')
        decode = results[self._decode]
        if decode is None or not decode.targets:
            raise NoEndpointError(f'decode profile "{self._decode}" found no endpoint')
        endpoints = tuple(t.endpoint for t in decode.targets)
        headers: dict[str, str] = {}
        routed: dict[str, ProfileResult] = {self._decode: decode}
        port = self._primary_port
        if port is not None:
            headers[DATA_PARALLEL_HEADER] = endpoints[0].address
            endpoints = tuple(_with_port(e, port) for e in endpoints)
        prefill = results.get(self._prefill)
        if prefill is not None and prefill.targets:
            headers[PREFILLER_HEADER] = prefill.targets[0].endpoint.address
            routed[self._prefill] = prefill
        return SchedulingResult(
            primary_profile=self._decode, endpoints=endpoints, profile_results=routed, headers=headers
        )


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    params = parse_params(DisaggParams, parameters, PLUGIN_TYPE, name)
    decider_name = params.decider_name
    if decider_name is None:
        return DisaggProfileHandler(name, None, params)
    where = f"{plugin_location(PLUGIN_TYPE, name)}: parameters.{params.decider_key}"
    try:
        decider = handle.plugin(decider_name)
    except KeyError:
        raise ConfigError(
            f"no plugin named {decider_name!r}: expected a P/D decider plugin declared in plugins",
            location=where,
        ) from None
    if not isinstance(decider, PDDecider):
        raise ConfigError(
            f"plugin {decider_name!r} ({decider.plugin_type}) is not a P/D decider "
            "(expected prefix-based-pd-decider, always-disagg-pd-decider or another decider)",
            location=where,
        )
    return DisaggProfileHandler(name, decider, params)
