"""``session-affinity-filter`` (llm-d): pin a session to the endpoint that served it, as a hard filter.

When the session's endpoint is among the candidates it is returned alone; without a session, with
a token that does not decode, or when that endpoint is no longer a candidate, every candidate is
returned unchanged (the filter never empties the set). Strategies and parameters: see
:mod:`scheduler.plugins.session`.

* ``encoded_endpoint_header`` (default): the header (``encodedEndpointHeaderConfig.header``, or the
  older ``headerName``; default ``x-session-token``) carries ``base64(ip:port)`` of the previous
  endpoint (llm-d encodes the pod's ``namespace/name``; the address is our endpoint identity, the
  same token as ``session-affinity-scorer``'s). As a
  :class:`~scheduler.interfaces.ResponseHeadersProvider` the filter writes that header on the
  response: the served endpoint's token, or with ``profileName`` the first target of that profile.
* ``session_id``: an opaque id from ``sessionIdConfig.sources`` bound to the endpoint a request
  was dispatched to (:class:`~scheduler.plugins.session.SessionBindings`); nothing is written to
  the client.

Parameters (llm-d's): ``strategy``, ``encodedEndpointHeaderConfig: {header}``, ``headerName`` (the
pre-August-2026 form of the header; not both), ``sessionIdConfig`` (only with ``session_id``),
``profileName``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle, Plugin
from scheduler.params import param
from scheduler.plugins import session as _session
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.request_attributes import AGENT_IDENTITY, RequestAttributeProducer
from scheduler.plugins.session import (
    DEFAULT_SESSION_ID_CONFIG,
    ENCODED,
    SESSION_ID,
    SESSION_TOKEN_HEADER,
    SessionBindings,
    SessionIdConfig,
    decode_token,
    encode_token,
    picked_address,
)
from scheduler.producers import DataNeed
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = [
    "MultiClusterSessionAffinityFilter",
    "SessionAffinityFilter",
    "SessionAffinityFilterParams",
    "SessionStrategyParams",
    "factory",
    "multicluster_factory",
]


@dataclass(frozen=True, slots=True)
class SessionStrategyParams:
    """llm-d's session-affinity parameters (shared by the filter and the scorer)."""

    strategy: str = param(ENCODED, choices=(ENCODED, SESSION_ID))
    encoded_endpoint_header_config: str | None = param(
        None,
        convert=_session.encoded_header_config,
        expect="a mapping {header: <name>}",
        render=_session.render_encoded_header_config,
    )
    header_name: str | None = param(None, convert=_session.header_name, expect="an HTTP header name")
    session_id_config: tuple[tuple[str, ...], float, float] | None = param(
        None,
        key="sessionIdConfig",
        convert=_session.session_id_config,
        expect="{sources, evictionTtlSeconds, ...}",
    )  # rendered by SessionIdConfig.as_yaml
    profile_name: str | None = None

    def __post_init__(self) -> None:
        if self.header_name is not None and self.encoded_endpoint_header_config is not None:
            raise ValueError("give encodedEndpointHeaderConfig.header or headerName, not both")
        if self.strategy == SESSION_ID and (
            self.header_name is not None or self.encoded_endpoint_header_config is not None
        ):
            raise ValueError(
                "encodedEndpointHeaderConfig / headerName apply to strategy encoded_endpoint_header"
            )
        if self.strategy == ENCODED and self.session_id_config is not None:
            raise ValueError("sessionIdConfig applies to strategy session_id")

    @property
    def header(self) -> str:
        """The encoded-endpoint token header (lower-case)."""
        name = self.encoded_endpoint_header_config or (self.header_name or "").strip().lower()
        return name or SESSION_TOKEN_HEADER

    @property
    def session(self) -> SessionIdConfig:
        """(session-id sources, TTL seconds, sweep seconds) of the session_id strategy."""
        config = self.session_id_config  # a SessionIdConfig when given (the converter makes one)
        return config if isinstance(config, SessionIdConfig) else DEFAULT_SESSION_ID_CONFIG


SessionAffinityFilterParams = SessionStrategyParams


class SessionAffinity(PluginBase):
    """What the filter and the scorer share: the wanted endpoint, the token, the bindings."""

    def __init__(self, name: str, params: SessionStrategyParams, clock: Callable[[], float]) -> None:
        super().__init__(name)
        self.params = params
        self._header = params.header
        self._profile = params.profile_name
        self._clock = clock
        self.bindings = SessionBindings(params.session) if params.strategy == SESSION_ID else None

    def data_needs(self) -> tuple[DataNeed, ...]:
        """The request attributes the session-id sources read (optional: unpublished ones yield nothing)."""
        if self.bindings is None:
            return ()
        return tuple(
            DataNeed(key, "sessionIdConfig.sources", False, _producer_type(key), optional=True)
            for key in self.bindings.attribute_keys()
        )

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if self.bindings is not None and isinstance(producer, RequestAttributeProducer):
            self.bindings.attributes[key] = producer.attribute

    def wanted(self, request: LLMRequest) -> str | None:
        """The session's endpoint address, None when the request has no (valid) session."""
        if self.bindings is not None:
            return self.bindings.bound(request)
        token = request.headers.get(self._header)
        return decode_token(token) if token else None

    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, served: str | None
    ) -> Mapping[str, str]:
        if self.bindings is not None:
            return {}
        address = picked_address(result, self._profile, served)
        return {self._header: encode_token(address)} if address else {}

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        if self.bindings is not None:
            self.bindings.bind(request, result, self._profile, self._clock())


class SessionAffinityFilter(SessionAffinity):
    plugin_type = "session-affinity-filter"

    def __init__(
        self,
        name: str,
        params: SessionStrategyParams | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name, params or SessionStrategyParams(), clock)

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        wanted = self.wanted(request)
        if wanted is None:
            return endpoints
        for endpoint in endpoints:
            if endpoint.address == wanted:
                return [endpoint]
        return endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return f"session pinned to {self.wanted(request)}"


class MultiClusterSessionAffinityFilter(SessionAffinityFilter):
    """llm-d's ``multicluster-session-affinity-filter``: the same filter, pinning a session to a cluster
    endpoint (in llm-d, cluster identity comes from multi-cluster discovery; the filter is unchanged)."""

    plugin_type = "multicluster-session-affinity-filter"


def _build(name: str, params: SessionStrategyParams, handle: Handle) -> SessionAffinityFilter:
    return SessionAffinityFilter(name, params, handle.clock)


def _build_multicluster(name: str, params: SessionStrategyParams, handle: Handle) -> SessionAffinityFilter:
    return MultiClusterSessionAffinityFilter(name, params, handle.clock)


factory = factory_with_params(SessionAffinityFilter.plugin_type, SessionStrategyParams, _build)
multicluster_factory = factory_with_params(
    MultiClusterSessionAffinityFilter.plugin_type, SessionStrategyParams, _build_multicluster
)


def _producer_type(key: str) -> str:
    return AGENT_IDENTITY if key.startswith(AGENT_IDENTITY + "/") else "session-id-producer"
