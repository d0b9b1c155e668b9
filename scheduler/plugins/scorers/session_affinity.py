"""``session-affinity-scorer``: keep a client session on the endpoint that served it before.

The soft-preference form of ``session-affinity-filter`` (same parameters and strategies, see
:mod:`scheduler.plugins.session`): 1.0 for the session's endpoint, 0.0 for every other endpoint;
all 0.0 without a (valid) session (never an error: a stale or forged token only loses its affinity).

* ``encoded_endpoint_header`` (default): the session token is ``base64(ip:port)`` (standard
  alphabet, padded) of the endpoint that served the session's previous request (llm-d encodes the
  pod's ``namespace/name``; the address is our endpoint identity), echoed by the client in the
  header (``encodedEndpointHeaderConfig.header`` or llm-d's older ``headerName``; default
  ``x-session-token``). Setting the token: this plugin implements
  :class:`~scheduler.interfaces.ResponseHeadersProvider` (re-exported here): after the model
  server's response headers arrive, the EPP adds ``{header: token}`` of the endpoint that served
  (the proxy-reported one when known, else the primary) or, with ``profileName`` set (e.g.
  ``prefill`` in P/D, usually with header ``x-session-token-prefill``), of the first target of that
  profile's result.
* ``session_id``: an opaque id from ``sessionIdConfig.sources``, bound to the endpoint a request
  was dispatched to; the binding stays when the bound endpoint was a candidate but another won.

Parameters: those of :class:`~scheduler.plugins.filters.session_affinity.SessionStrategyParams`,
plus ``algorithm`` (pyepp's earlier spelling of the strategy; only ``encoded_endpoint_header``).
``score`` is pure: one header lookup and one base64 decode (or one dict lookup) per request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle, ResponseHeadersProvider
from scheduler.params import param
from scheduler.plugins.base import factory_with_params
from scheduler.plugins.filters.session_affinity import SessionAffinity, SessionStrategyParams
from scheduler.plugins.session import ENCODED, SESSION_TOKEN_HEADER, decode_token, encode_token
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "SESSION_TOKEN_HEADER",
    "ResponseHeadersProvider",
    "SessionAffinityParams",
    "SessionAffinityScorer",
    "decode_token",
    "encode_token",
    "factory",
]


@dataclass(frozen=True, slots=True)
class SessionAffinityParams(SessionStrategyParams):
    algorithm: str = param(ENCODED, choices=(ENCODED,))


class SessionAffinityScorer(SessionAffinity):
    plugin_type = "session-affinity-scorer"

    def __init__(
        self,
        name: str,
        params: SessionAffinityParams | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name, params or SessionAffinityParams(), clock)

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        address = self.wanted(request)
        if address is None:
            return [0.0] * len(endpoints)
        return [1.0 if e.address == address else 0.0 for e in endpoints]


def _build(name: str, params: SessionAffinityParams, handle: Handle) -> SessionAffinityScorer:
    return SessionAffinityScorer(name, params, handle.clock)


factory = factory_with_params(SessionAffinityScorer.plugin_type, SessionAffinityParams, _build)
