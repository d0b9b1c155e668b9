"""``session-affinity-filter`` (llm-d): pin a session to the endpoint that served it, as a hard filter.

When the session's endpoint is among the candidates it is returned alone; without a session, with
a token that does not decode, or when that endpoint is no longer a candidate, every candidate is
returned unchanged (the filter never empties the set). Two strategies (``strategy``):

* ``encoded_endpoint_header`` (default, stateless): the request header
  (``encodedEndpointHeaderConfig.header``, or the older ``headerName``; default ``x-session-token``)
  carries ``base64(ip:port)`` of the previous endpoint (llm-d encodes the pod's ``namespace/name``;
  the address is our endpoint identity, the same token as ``session-affinity-scorer``'s). As a
  :class:`~scheduler.interfaces.ResponseHeadersProvider` the filter writes that header on the
  response: the served endpoint's token, or with ``profileName`` the first target of that profile.
* ``session_id`` (stateful): the client sends an opaque session id in one of
  ``sessionIdConfig.sources`` (``[{header: x-session-id}]`` by default; the first non-blank value
  wins). The filter keeps a binding session id -> endpoint address, set when a request is
  dispatched (the primary endpoint, or with ``profileName`` the first target of that profile);
  an unbound session expresses no preference; a bound session whose endpoint is gone passes
  through and is rebound to where the request went. Nothing is written to the client. A binding
  unused for ``evictionTtlSeconds`` (default 300; 0 = default) expires; expired bindings are swept
  at most every ``evictionSweepSeconds`` (default 10), on dispatch. At most
  :data:`MAX_SESSIONS` bindings are kept (the least recently used are dropped beyond that).
  Sources of type ``attribute`` (request attributes published by other llm-d plugins) are not
  available here and are rejected.

Parameters (llm-d's): ``strategy``, ``encodedEndpointHeaderConfig: {header}``, ``headerName`` (the
pre-August-2026 form of the header; not both), ``sessionIdConfig: {sources, evictionTtlSeconds,
evictionSweepSeconds}`` (only with ``session_id``), ``profileName``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.scorers.session_affinity import SESSION_TOKEN_HEADER, decode_token, encode_token
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = ["MAX_SESSIONS", "SessionAffinityFilter", "SessionAffinityFilterParams", "factory"]

ENCODED = "encoded_endpoint_header"
SESSION_ID = "session_id"
SESSION_ID_HEADER = "x-session-id"
MAX_SESSIONS = 100_000
"""Budget of the ``session_id`` binding map (about 100 bytes each: ~10 MB at the cap)."""


def _header(raw: Any, field: str) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"{field}: expected a header name, got {raw!r}")
    return raw.strip().lower() or ""


def _encoded_config(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or set(raw) - {"header"}:
        raise ValueError("expected a mapping with key header")
    return _header(raw.get("header", ""), "header") or None


def _seconds(raw: Any, field: str, default: float) -> float:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < 0:
        raise ValueError(f"{field}: expected a number of seconds > 0 (0 = the default), got {raw!r}")
    return float(raw) or default


def _session_config(raw: Any) -> tuple[tuple[str, ...], float, float] | None:
    if raw is None:
        return None
    keys = {"sources", "evictionTtlSeconds", "evictionSweepSeconds"}
    if not isinstance(raw, Mapping) or set(raw) - keys:
        raise ValueError(f"expected a mapping with keys {', '.join(sorted(keys))}")
    sources = raw.get("sources") or []
    if not isinstance(sources, list):
        raise ValueError("sources: expected a list of {header: <name>}")
    headers: list[str] = []
    for i, source in enumerate(sources):
        if not isinstance(source, Mapping) or set(source) - {"header", "attribute", "producer"}:
            raise ValueError(f"sources[{i}]: expected {{header: <name>}} or {{attribute: <key>}}")
        header, attribute = source.get("header") or "", source.get("attribute") or ""
        if bool(header) == bool(attribute):
            raise ValueError(f"sources[{i}]: exactly one of header or attribute must be set")
        if attribute:
            raise ValueError(
                f"sources[{i}].attribute: request-attribute sources are not supported "
                "(no plugin here publishes request attributes); use a header source"
            )
        headers.append(_header(header, f"sources[{i}].header") or SESSION_ID_HEADER)
    ttl = _seconds(raw.get("evictionTtlSeconds"), "evictionTtlSeconds", 300.0)
    sweep = _seconds(raw.get("evictionSweepSeconds"), "evictionSweepSeconds", 10.0)
    return (tuple(headers) or (SESSION_ID_HEADER,), ttl, sweep)


@dataclass(frozen=True, slots=True)
class SessionAffinityFilterParams:
    strategy: str = param(ENCODED, choices=(ENCODED, SESSION_ID))
    encoded_endpoint_header_config: str | None = param(
        None, convert=_encoded_config, expect="a mapping {header: <name>}"
    )
    header_name: str | None = None
    session_id_config: tuple[tuple[str, ...], float, float] | None = param(
        None, key="sessionIdConfig", convert=_session_config, expect="{sources, evictionTtlSeconds, ...}"
    )
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
    def session(self) -> tuple[tuple[str, ...], float, float]:
        """(session-id headers, TTL seconds, sweep seconds) of the session_id strategy."""
        return self.session_id_config or ((SESSION_ID_HEADER,), 300.0, 10.0)


class SessionAffinityFilter(PluginBase):
    plugin_type = "session-affinity-filter"

    def __init__(
        self,
        name: str,
        params: SessionAffinityFilterParams | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name)
        self.params = params = params or SessionAffinityFilterParams()
        self._stateful = params.strategy == SESSION_ID
        self._header = params.header
        self._profile = params.profile_name
        self._sources, self._ttl, self._sweep = params.session
        self._clock = clock
        self._bindings: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._last_sweep = 0.0

    # -- the filter ---------------------------------------------------------------------------------

    def _session_id(self, request: LLMRequest) -> str:
        for header in self._sources:
            value = request.headers.get(header, "").strip()
            if value:
                return value
        return ""

    def _wanted(self, request: LLMRequest) -> str | None:
        if self._stateful:
            session = self._session_id(request)
            bound = self._bindings.get(session) if session else None
            return bound[0] if bound is not None else None
        token = request.headers.get(self._header)
        return decode_token(token) if token else None

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        wanted = self._wanted(request)
        if wanted is None:
            return endpoints
        for endpoint in endpoints:
            if endpoint.address == wanted:
                return [endpoint]
        return endpoints

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return f"session pinned to {self._wanted(request)}"

    # -- the session token / binding ----------------------------------------------------------------

    def _picked(self, result: SchedulingResult, served: str | None = None) -> str | None:
        if self._profile is not None:
            profile = result.profile_results.get(self._profile)
            return profile.targets[0].endpoint.address if profile is not None and profile.targets else None
        return served or (result.endpoints[0].address if result.endpoints else None)

    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, served: str | None
    ) -> Mapping[str, str]:
        if self._stateful:
            return {}
        address = self._picked(result, served)
        return {self._header: encode_token(address)} if address else {}

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        if not self._stateful:
            return
        session = self._session_id(request)
        address = self._picked(result)
        if not session or address is None:
            return
        now = self._clock()
        bindings = self._bindings
        bindings[session] = (address, now)
        bindings.move_to_end(session)
        while len(bindings) > MAX_SESSIONS:
            bindings.popitem(last=False)
        if now - self._last_sweep >= self._sweep:
            self._last_sweep = now
            while bindings:
                oldest, (_, seen) = next(iter(bindings.items()))
                if now - seen <= self._ttl:
                    break
                del bindings[oldest]


def _build(name: str, params: SessionAffinityFilterParams, handle: Handle) -> SessionAffinityFilter:
    return SessionAffinityFilter(name, params, handle.clock)


factory = factory_with_params(SessionAffinityFilter.plugin_type, SessionAffinityFilterParams, _build)
