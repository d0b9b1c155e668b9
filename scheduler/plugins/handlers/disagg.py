"""``disagg-profile-handler`` (llm-d): encode / prefill / decode disaggregation (D, P/D, E/PD, E/P/D).

Stages (``stageOrder``, llm-d's default ``decode-first``):

1. decode (always), plus any shadow profiles (observation only);
2. encode, if the encode profile exists, an encode decider is configured and it says so for the
   chosen decode endpoint (``always-disagg-multimodal-decider``: the request has image, video or
   audio content);
3. prefill, if the prefill profile exists, a P/D decider is configured and it says so for the
   chosen decode endpoint. The decode pick is published in the cycle state (:data:`PEER_ENDPOINT`)
   for the prefill profile's plugins.

With ``prefill-first``: prefill runs first whenever its profile exists (no P/D decider allowed),
then encode (its decider is asked with no decode endpoint), then decode, with the prefill pick
published as :data:`PEER_ENDPOINT`.

A failed decode run stops the cycle and raises NoEndpointError; a failed or skipped encode or
prefill run only drops that stage. Result: the primary profile is decode (its targets are routed);
headers, as llm-d's sidecar expects them: ``x-prefiller-host-port: <prefill ip:port>`` when prefill
found an endpoint, ``x-encoder-hosts-ports: <ip:port>,<ip:port>...`` (every encode target, in order)
when encode found endpoints.

Metrics (llm-d's ``disagg_decision_total{plugin_name, plugin_type, model_name, decision_type}``, see
:class:`scheduler.observer.PluginMetrics`): once per request whose decode run found an endpoint, when
the handler is done: ``encode-prefill-decode``, ``encode-decode``, ``prefill-decode`` or
``decode-only``, by which of the encode and prefill stages found an endpoint (a stage skipped by its
decider or whose run failed counts as not used). A failed decode run records nothing.

Data parallelism (``primaryPort``): when set, every decode target is rewritten to that port (the
rank-0 server of a data-parallel group) and the originally chosen ``ip:port`` goes in header
``x-data-parallel-host-port``, as llm-d's pd-profile-handler does.

Parameters: see :mod:`scheduler.plugins.handlers.disagg_params` (llm-d's nested ``profiles`` /
``deciders`` form and its deprecated flat form). The decider is a plugin declared anywhere in
``plugins`` (created first, as upstream orders plugins by their references); without one the
prefill stage never runs (llm-d's behaviour: P/D disabled), and a configuration that names a
decider but has no prefill profile routes decode-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from scheduler.cycle_state import CycleState, StateKey
from scheduler.errors import ConfigError, NoEndpointError
from scheduler.headers import DATA_PARALLEL_HEADER, ENCODER_HEADER, PREFILLER_HEADER
from scheduler.interfaces import Handle, PDDecider, Plugin
from scheduler.observer import NO_PLUGIN_METRICS, PluginMetrics
from scheduler.params import parse_params, plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.handlers.disagg_deciders import DECIDER_PREFIX_MATCH
from scheduler.plugins.handlers.disagg_params import PREFILL_FIRST, DisaggParams
from scheduler.plugins.prefix.consumer import PrefixMatchConsumer
from scheduler.profile import SchedulerProfile
from scheduler.roles import has_role
from scheduler.types import Endpoint, EndpointView, LLMRequest, ProfileResult, SchedulingResult

__all__ = [
    "DATA_PARALLEL_HEADER",
    "ENCODER_HEADER",
    "PEER_ENDPOINT",
    "PREFILLER_HEADER",
    "DisaggProfileHandler",
    "decision_type",
    "disagg_headers",
    "factory",
    "resolve_decider",
    "with_port",
]

PLUGIN_TYPE = "disagg-profile-handler"
PEER_ENDPOINT = StateKey[EndpointView]("disagg-profile-handler/peer-endpoint")
"""The endpoint picked by the earlier of decode and prefill, for plugins of the later profile."""
_SKIPPED = StateKey[set[str]]("disagg-profile-handler/skipped")


def with_port(endpoint: EndpointView, port: int) -> EndpointView:
    """``endpoint`` with its address's port replaced (data parallelism's rank-0 port)."""
    host = endpoint.address.rpartition(":")[0] or endpoint.address
    return Endpoint(
        address=f"{host}:{port}",
        name=endpoint.name,
        labels=endpoint.labels,
        ready=endpoint.ready,
        metrics=endpoint.metrics,
        attributes=endpoint.attributes,
    )


def decision_type(encode_used: bool, prefill_used: bool) -> str:
    """The ``decision_type`` label for the stages that were used (llm-d's DisaggDecisionType)."""
    if encode_used:
        return "encode-prefill-decode" if prefill_used else "encode-decode"
    return "prefill-decode" if prefill_used else "decode-only"


def _used(results: Mapping[str, ProfileResult | None], stage: str | None) -> bool:
    result = results.get(stage) if stage is not None else None
    return result is not None and bool(result.targets)


def disagg_headers(
    results: Mapping[str, ProfileResult | None], prefill: str | None, encode: str | None
) -> dict[str, str]:
    """The sidecar headers for the prefill and encode profile results (llm-d's PreRequest)."""
    headers: dict[str, str] = {}
    prefill_result = results.get(prefill) if prefill is not None else None
    if prefill_result is not None and prefill_result.targets:
        headers[PREFILLER_HEADER] = prefill_result.targets[0].endpoint.address
    encode_result = results.get(encode) if encode is not None else None
    if encode_result is not None and encode_result.targets:
        headers[ENCODER_HEADER] = ",".join(t.endpoint.address for t in encode_result.targets)
    return headers


class DisaggProfileHandler(PrefixMatchConsumer, PluginBase):
    """Consumes the default prefix producer's match (llm-d-router's handler ``Consumes``
    PrefixCacheMatchInfo): under ``llm-d.ai/v1alpha1`` an ``approx-prefix-cache-producer`` is added
    when none is configured, and its match is what the prefill decider judges
    (:data:`~scheduler.plugins.handlers.disagg_deciders.DECIDER_PREFIX_MATCH`); under the legacy
    apiVersion the decider reads the cycle's published match."""

    plugin_type = PLUGIN_TYPE
    owned_request_headers: ClassVar[frozenset[str]] = frozenset({PREFILLER_HEADER, ENCODER_HEADER})

    def __init__(
        self,
        name: str,
        decider: PDDecider | None,
        params: DisaggParams | None = None,
        encode_decider: PDDecider | None = None,
    ) -> None:
        super().__init__(name)
        self.params = params = params or DisaggParams()
        self.decider = decider
        self.encode_decider = encode_decider
        self._decode = params.decode
        self._prefill = params.prefill
        self._encode = params.encode
        self._primary_port = params.primary_port
        self._prefill_first = params.stage_order == PREFILL_FIRST
        self._metrics: PluginMetrics = NO_PLUGIN_METRICS

    def bind_metrics(self, metrics: PluginMetrics) -> None:
        self._metrics = metrics

    def _record(self, request: LLMRequest, results: Mapping[str, ProfileResult | None]) -> None:
        decision = decision_type(_used(results, self._encode), _used(results, self._prefill))
        self._metrics.disagg_decision(PLUGIN_TYPE, self.name, request.target_model, decision)

    def _stage(
        self,
        cycle: CycleState,
        request: LLMRequest,
        stage: str,
        decider: PDDecider | None,
        decode: EndpointView | None,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileResult | None],
    ) -> SchedulerProfile | None:
        """The stage's profile when it should run now; a rejection is remembered for the cycle."""
        profile = profiles.get(stage)
        if profile is None or stage in results or decider is None:
            return None
        skipped = cycle.read(_SKIPPED)
        if skipped is not None and stage in skipped:
            return None
        if self.producer is not None and decode is not None:
            cycle.write(DECIDER_PREFIX_MATCH, self.producer.match(cycle, request))
        if decider.should_disaggregate(cycle, request, decode):
            return profile
        if skipped is None:
            cycle.write(_SKIPPED, skipped := set())
        skipped.add(stage)
        return None

    def pick_profiles(
        self,
        cycle: CycleState,
        request: LLMRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileResult | None],
    ) -> Mapping[str, SchedulerProfile]:
        if self._prefill_first:
            return self._pick_prefill_first(cycle, request, profiles, results)
        if self._decode not in results:
            decode = profiles.get(self._decode)
            if decode is None:
                return {}  # process_results reports the missing profile
            first = {n: p for n, p in profiles.items() if p.shadow and n not in results}
            first[self._decode] = decode
            return first
        decode_result = results[self._decode]
        if decode_result is None or not decode_result.targets:
            return {}
        picked = decode_result.targets[0].endpoint
        encode = self._stage(cycle, request, self._encode, self.encode_decider, picked, profiles, results)
        if encode is not None:
            return {self._encode: encode}
        prefill = self._stage(cycle, request, self._prefill, self.decider, picked, profiles, results)
        if prefill is not None:
            cycle.write(PEER_ENDPOINT, picked)
            return {self._prefill: prefill}
        self._record(request, results)
        return {}

    def _pick_prefill_first(
        self,
        cycle: CycleState,
        request: LLMRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileResult | None],
    ) -> Mapping[str, SchedulerProfile]:
        if self._decode in results:
            if _used(results, self._decode):
                self._record(request, results)
            return {}
        first = {n: p for n, p in profiles.items() if p.shadow and n not in results}
        prefill = profiles.get(self._prefill)
        if prefill is not None and self._prefill not in results:
            first[self._prefill] = prefill
            return first
        encode = self._stage(cycle, request, self._encode, self.encode_decider, None, profiles, results)
        if encode is not None:
            first[self._encode] = encode
            return first
        decode = profiles.get(self._decode)
        if decode is None:
            return first
        prefill_result = results.get(self._prefill)
        if prefill_result is not None and prefill_result.targets:
            cycle.write(PEER_ENDPOINT, prefill_result.targets[0].endpoint)
        first[self._decode] = decode
        return first

    def process_results(
        self, cycle: CycleState, request: LLMRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        if self._decode not in results:
            raise NoEndpointError(f'decode profile "{self._decode}" is not configured or was not run')
        decode = results[self._decode]
        if decode is None or not decode.targets:
            raise NoEndpointError(f'decode profile "{self._decode}" found no endpoint')
        endpoints = tuple(t.endpoint for t in decode.targets)
        headers = disagg_headers(results, self._prefill, self._encode)
        routed: dict[str, ProfileResult] = {self._decode: decode}
        for stage in (self._prefill, self._encode):
            stage_result = results.get(stage)
            if stage_result is not None and stage_result.targets:
                routed[stage] = stage_result
        port = self._primary_port
        if port is not None:
            headers[DATA_PARALLEL_HEADER] = endpoints[0].address
            endpoints = tuple(with_port(e, port) for e in endpoints)
        return SchedulingResult(
            primary_profile=self._decode, endpoints=endpoints, profile_results=routed, headers=headers
        )


def resolve_decider(handle: Handle, plugin_type: str, name: str, decider_name: str, key: str) -> PDDecider:
    """The decider plugin ``decider_name`` (ConfigError at ``parameters.<key>`` when unusable)."""
    where = f"{plugin_location(plugin_type, name)}: parameters.{key}"
    try:
        decider = handle.plugin(decider_name)
    except KeyError:
        raise ConfigError(
            f"no plugin named {decider_name!r}: expected a decider plugin of this configuration",
            location=where,
        ) from None
    if not (isinstance(decider, PDDecider) and has_role(decider, PDDecider)):
        raise ConfigError(
            f"plugin {decider_name!r} ({decider.plugin_type}) is not a decider (expected "
            "prefix-based-pd-decider, always-disagg-pd-decider, always-disagg-multimodal-decider "
            "or another decider)",
            location=where,
        )
    return decider


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    params = parse_params(DisaggParams, parameters, PLUGIN_TYPE, name)
    decider = encode_decider = None
    if params.decider_name is not None:
        decider = resolve_decider(handle, PLUGIN_TYPE, name, params.decider_name, params.decider_key)
    if params.encode_decider_name is not None:
        encode_decider = resolve_decider(
            handle, PLUGIN_TYPE, name, params.encode_decider_name, params.encode_decider_key
        )
    return DisaggProfileHandler(name, decider, params, encode_decider)
