"""``pd-profile-handler`` (llm-d's original P/D handler, deprecated there for disagg-profile-handler).

Profile runs: the decode profile; then, if decode found an endpoint and not every profile has run,
the prefill profile when the decider says so for the chosen decode endpoint. Unlike
``disagg-profile-handler`` it sets **no** ``x-prefiller-host-port`` header itself: as in llm-d, that
is the job of a ``prefill-header-handler`` (or ``disagg-headers-handler``) configured next to it.
A failed decode run raises NoEndpointError; a failed prefill run drops the prefill result.

Metrics (llm-d's ``pd_decision_total{plugin_name, plugin_type, model_name, decision_type}``, see
:class:`scheduler.observer.PluginMetrics`): once per request whose decode run found an endpoint while
a profile is still to run, when the decider is asked: ``prefill-decode`` when it says to disaggregate
(recorded before the prefill profile runs, whatever that run finds), ``decode-only`` otherwise.

Data parallelism (``primaryPort`` other than 0): decode targets are rewritten to that port and the
chosen ``ip:port`` goes in ``x-data-parallel-host-port``.

Parameters (llm-d's): ``decodeProfile`` (default ``decode``), ``prefillProfile`` (default
``prefill``), ``deciderPluginName`` (default ``prefix-based-pd-decider``; must name a decider of the
configuration, any declaration order), ``primaryPort`` (0 = off, the default, or 1-65535),
``prefixPluginName`` / ``prefixPluginType`` (deprecated in llm-d and never used there beyond being a
plugin reference: when given, the name (or, without a name, the type) must be a plugin of the
configuration), ``prefixMatchInfoProducerName`` (llm-d-router; default "").

``prefixMatchInfoProducerName`` makes the handler a prefix-match consumer (:mod:`scheduler.producers`),
as llm-d-router's handler declares the match it needs: "" needs the ``approx-prefix-cache-producer``
(injected with default parameters under ``llm-d.ai/v1alpha1`` when absent; under the legacy apiVersion,
or next to a ``prefix-cache-scorer`` with its own index, the cycle's published match is used); a name
must be a prefix producer of the configuration (ConfigError at this parameter otherwise). The match of
the bound producer is what the decider judges (:data:`DECIDER_PREFIX_MATCH`). Upstream's
prefix-based-pd-decider reads the default producer's match whatever the handler names, so with only a
renamed producer it never disaggregates; pyepp's decider reads the producer the handler names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError, NoEndpointError
from scheduler.interfaces import Handle, PDDecider, Plugin
from scheduler.observer import NO_PLUGIN_METRICS, PluginMetrics
from scheduler.params import param, parse_params, plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.handlers.disagg import DATA_PARALLEL_HEADER, PEER_ENDPOINT, resolve_decider, with_port
from scheduler.plugins.handlers.disagg_deciders import DECIDER_PREFIX_MATCH
from scheduler.plugins.prefix.consumer import PrefixMatchConsumer
from scheduler.profile import SchedulerProfile
from scheduler.types import LLMRequest, ProfileResult, SchedulingResult

__all__ = ["DECODE_ONLY", "PREFILL_DECODE", "PdParams", "PdProfileHandler", "factory"]

_log = logging.getLogger("scheduler.plugins")

PLUGIN_TYPE = "pd-profile-handler"
DECODE_ONLY = "decode-only"
PREFILL_DECODE = "prefill-decode"


def _port(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not (raw == 0 or 1 <= raw <= 65535):
        raise ValueError(raw)
    return raw


@dataclass(frozen=True, slots=True)
class PdParams:
    decode_profile: str = param("decode")
    prefill_profile: str = param("prefill")
    decider_plugin_name: str = param("prefix-based-pd-decider")
    primary_port: int = param(0, convert=_port, expect="0 (off) or a port 1-65535")
    prefix_plugin_name: str = param("")
    prefix_plugin_type: str = param("")
    prefix_match_info_producer_name: str = param("")


class PdProfileHandler(PrefixMatchConsumer, PluginBase):
    plugin_type = PLUGIN_TYPE

    def __init__(self, name: str, decider: PDDecider, params: PdParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or PdParams()
        self.decider = decider
        self._decode = params.decode_profile
        self._prefill = params.prefill_profile
        self._primary_port = params.primary_port
        self.producer_name = params.prefix_match_info_producer_name
        self._metrics: PluginMetrics = NO_PLUGIN_METRICS

    def bind_metrics(self, metrics: PluginMetrics) -> None:
        self._metrics = metrics

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
                return {}
            first = {n: p for n, p in profiles.items() if p.shadow and n not in results}
            first[self._decode] = decode
            return first
        decode_result = results[self._decode]
        prefill = profiles.get(self._prefill)
        if (
            len(results) >= len(profiles)
            or decode_result is None
            or not decode_result.targets
            or prefill is None
            or self._prefill in results
        ):
            return {}
        picked = decode_result.targets[0].endpoint
        if self.producer is not None:
            cycle.write(DECIDER_PREFIX_MATCH, self.producer.match(cycle, request))
        if self.decider.should_disaggregate(cycle, request, picked):
            self._metrics.pd_decision(PLUGIN_TYPE, self.name, request.target_model, PREFILL_DECODE)
            cycle.write(PEER_ENDPOINT, picked)
            return {self._prefill: prefill}
        self._metrics.pd_decision(PLUGIN_TYPE, self.name, request.target_model, DECODE_ONLY)
        return {}

    def process_results(
        self, cycle: CycleState, request: LLMRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        decode = results.get(self._decode)
        if decode is None or not decode.targets:
            raise NoEndpointError(f'failed to find available decode workers (profile "{self._decode}")')
        endpoints = tuple(t.endpoint for t in decode.targets)
        headers: dict[str, str] = {}
        if self._primary_port:
            headers[DATA_PARALLEL_HEADER] = endpoints[0].address
            endpoints = tuple(with_port(e, self._primary_port) for e in endpoints)
        routed: dict[str, ProfileResult] = {self._decode: decode}
        prefill = results.get(self._prefill)
        if prefill is not None:
            routed[self._prefill] = prefill
        return SchedulingResult(
            primary_profile=self._decode, endpoints=endpoints, profile_results=routed, headers=headers
        )


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    params = parse_params(PdParams, parameters, PLUGIN_TYPE, name)
    _log.info('%s "%s" is deprecated (as in llm-d): use disagg-profile-handler instead', PLUGIN_TYPE, name)
    where = plugin_location(PLUGIN_TYPE, name)
    if not params.decider_plugin_name:
        raise ConfigError(
            "decider plugin name is not defined", location=f"{where}: parameters.deciderPluginName"
        )
    decider = resolve_decider(handle, PLUGIN_TYPE, name, params.decider_plugin_name, "deciderPluginName")
    prefix_ref = params.prefix_plugin_name or params.prefix_plugin_type
    if prefix_ref:
        key = "prefixPluginName" if params.prefix_plugin_name else "prefixPluginType"
        try:
            handle.plugin(prefix_ref)
        except KeyError:
            raise ConfigError(
                f"a plugin has a dependency on the unregistered plugin {prefix_ref!r}",
                location=f"{where}: parameters.{key}",
            ) from None
    return PdProfileHandler(name, decider, params)
