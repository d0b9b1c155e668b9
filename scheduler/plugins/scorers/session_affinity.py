"""``session-affinity-scorer``: keep a client session on the endpoint that served it before.

The session token is ``base64(ip:port)`` (standard alphabet, padded) of the endpoint that served the
session's previous request (llm-d encodes the pod's ``namespace/name``; the address is our endpoint
identity). The client echoes it back in request header ``headerName`` (default ``x-session-token``).

Score: 1.0 for the endpoint whose address the token decodes to, 0.0 for every other endpoint; all
0.0 when the header is absent or not a valid token (never an error: a stale or forged token only
loses its affinity).

Setting the token: this plugin implements :class:`~scheduler.interfaces.ResponseHeadersProvider`
(re-exported here). After the model server's response headers arrive, the EPP calls
``response_headers(request, result, served)`` and adds the returned headers to the response sent to
the client: ``headerName`` = the token of the endpoint that served (the proxy-reported one when
known, else the primary), or, with ``profileName`` set (e.g. ``prefill`` in P/D, usually with
``headerName: x-session-token-prefill``), of the first target of that profile's result.

Parameters (llm-d names): ``headerName`` (default ``x-session-token``), ``profileName`` (default
none = the routed endpoint), ``algorithm`` (only ``encoded_endpoint_header``, the default; llm-d's
stateful ``session_id_header`` is not provided). ``score`` is pure: one header lookup and one base64
decode per request.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import ResponseHeadersProvider
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = [
    "SESSION_TOKEN_HEADER",
    "ResponseHeadersProvider",
    "SessionAffinityParams",
    "SessionAffinityScorer",
    "decode_token",
    "encode_token",
    "factory",
]

SESSION_TOKEN_HEADER = "x-session-token"


def encode_token(address: str) -> str:
    return base64.b64encode(address.encode()).decode("ascii")


def decode_token(token: str) -> str | None:
    """The address in ``token``, or None when it is not a valid token."""
    try:
        return base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _header_name(raw: object) -> str:
    if not isinstance(raw, str) or not raw or raw != raw.strip() or ":" in raw:
        raise ValueError("not a header name")
    return raw.lower()


@dataclass(frozen=True, slots=True)
class SessionAffinityParams:
    header_name: str = param(SESSION_TOKEN_HEADER, convert=_header_name, expect="an HTTP header name")
    profile_name: str | None = None
    algorithm: str = param("encoded_endpoint_header", choices=("encoded_endpoint_header",))


class SessionAffinityScorer(PluginBase):
    plugin_type = "session-affinity-scorer"

    def __init__(self, name: str, params: SessionAffinityParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or SessionAffinityParams()
        self._header = params.header_name
        self._profile = params.profile_name

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        token = request.headers.get(self._header)
        address = decode_token(token) if token else None
        if address is None:
            return [0.0] * len(endpoints)
        return [1.0 if e.address == address else 0.0 for e in endpoints]

    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, served: str | None
    ) -> Mapping[str, str]:
        if self._profile is not None:
            profile = result.profile_results.get(self._profile)
            address = profile.targets[0].endpoint.address if profile is not None and profile.targets else None
        else:
            address = served or (result.endpoints[0].address if result.endpoints else None)
        return {self._header: encode_token(address)} if address else {}


factory = factory_with_params(
    SessionAffinityScorer.plugin_type,
    SessionAffinityParams,
    lambda name, params, handle: SessionAffinityScorer(name, params),
)
