"""Session affinity shared by ``session-affinity-filter`` and ``session-affinity-scorer`` (llm-d).

Parameters, as llm-d's (current form; the scorer also keeps llm-d's older ``headerName``)::

    strategy: encoded_endpoint_header          # or session_id
    encodedEndpointHeaderConfig: {header: x-session-token}
    sessionIdConfig:
      sources: [{header: x-session-id}]        # first non-blank value wins
      evictionTtlSeconds: 300                  # 0 = default
      evictionSweepSeconds: 10                 # 0 = default
    profileName: prefill                       # whose pick the session pins (default: the routed one)

``encoded_endpoint_header`` is stateless: the token is ``base64(ip:port)`` of the endpoint that
served, echoed by the client. ``session_id`` is stateful (:class:`SessionBindings`): the binding
session id -> endpoint is made when a request is dispatched; an existing binding moves to the new
endpoint only when the bound one was not among the candidates of that profile (it left, or was
filtered out), as in llm-d. A request-attribute source ``{attribute: <name>, producer: <instance>}``
reads the attribute a header-derived producer publishes (``agent-identity``; ``SessionID`` of a
``session-id-producer``, :mod:`scheduler.plugins.request_attributes`); it is kept in the sources as
``attribute:<name>/<producer>`` and bound at configuration time (an attribute no configured plugin
publishes yields nothing, as upstream's missing attribute).
"""

from __future__ import annotations

import base64
import binascii
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from scheduler.types import LLMRequest, SchedulingResult

__all__ = [
    "ATTRIBUTE_SOURCE",
    "ENCODED",
    "MAX_SESSIONS",
    "SESSION_ID",
    "SESSION_ID_HEADER",
    "SESSION_TOKEN_HEADER",
    "SessionBindings",
    "SessionIdConfig",
    "decode_token",
    "encode_token",
    "encoded_header_config",
    "header_name",
    "picked_address",
    "render_encoded_header_config",
    "session_id_config",
]

ENCODED = "encoded_endpoint_header"
SESSION_ID = "session_id"
SESSION_TOKEN_HEADER = "x-session-token"
SESSION_ID_HEADER = "x-session-id"
MAX_SESSIONS = 100_000
"""Budget of one plugin's ``session_id`` binding map (about 100 bytes each: ~10 MB at the cap)."""

ATTRIBUTE_SOURCE = "attribute:"


class SessionIdConfig(NamedTuple):
    """``sessionIdConfig`` resolved: sources in priority order (header names or ``attribute:<key>``),
    TTL and sweep interval in seconds."""

    sources: tuple[str, ...]
    ttl: float
    sweep: float

    def as_yaml(self) -> dict[str, Any]:
        """The YAML form (what ``check-config`` renders; it loads back to the same value)."""
        sources: list[dict[str, str]] = []
        for source in self.sources:
            if source.startswith(ATTRIBUTE_SOURCE):
                attribute, _, producer = source[len(ATTRIBUTE_SOURCE) :].partition("/")
                sources.append({"attribute": attribute, **({"producer": producer} if producer else {})})
            else:
                sources.append({"header": source})
        return {"sources": sources, "evictionTtlSeconds": self.ttl, "evictionSweepSeconds": self.sweep}


AttributeReader = Callable[[Mapping[str, str]], str]

DEFAULT_SESSION_ID_CONFIG = SessionIdConfig((SESSION_ID_HEADER,), 300.0, 10.0)


def encode_token(address: str) -> str:
    return base64.b64encode(address.encode()).decode("ascii")


def decode_token(token: str) -> str | None:
    """The address in ``token``, or None when it is not a valid token."""
    try:
        return base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _header(raw: Any, field: str) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"{field}: expected a header name, got {raw!r}")
    return raw.strip().lower()


def header_name(raw: Any) -> str:
    """llm-d's older ``headerName``: a non-empty HTTP header name, lower-cased."""
    if not isinstance(raw, str) or not raw or raw != raw.strip() or ":" in raw:
        raise ValueError("not a header name")
    return raw.lower()


def encoded_header_config(raw: Any) -> str | None:
    """``encodedEndpointHeaderConfig`` -> the lower-cased header (None: the default)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or set(raw) - {"header"}:
        raise ValueError("expected a mapping with key header")
    return _header(raw.get("header", ""), "header") or None


def render_encoded_header_config(header: str) -> dict[str, str]:
    """The YAML form of :func:`encoded_header_config`'s value."""
    return {"header": header}


def _seconds(raw: Any, field: str, default: float) -> float:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < 0:
        raise ValueError(f"{field}: expected a number of seconds > 0 (0 = the default), got {raw!r}")
    return float(raw) or default


def session_id_config(raw: Any) -> SessionIdConfig | None:
    """``sessionIdConfig`` -> (headers, ttl, sweep); ValueError naming the bad field."""
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
        producer = source.get("producer") or ""
        if attribute:
            if not isinstance(attribute, str) or not isinstance(producer, str):
                raise ValueError(f"sources[{i}]: attribute and producer must be strings")
            headers.append(f"{ATTRIBUTE_SOURCE}{attribute}/{producer}")
            continue
        if producer:
            raise ValueError(f"sources[{i}].producer: only with attribute")
        name = _header(header, f"sources[{i}].header")
        if ":" in name[1:]:
            raise ValueError(f"sources[{i}].header: expected a header name, got {header!r}")
        headers.append(name or SESSION_ID_HEADER)
    ttl = _seconds(raw.get("evictionTtlSeconds"), "evictionTtlSeconds", 300.0)
    sweep = _seconds(raw.get("evictionSweepSeconds"), "evictionSweepSeconds", 10.0)
    return SessionIdConfig(tuple(headers) or (SESSION_ID_HEADER,), ttl, sweep)


def picked_address(result: SchedulingResult, profile: str | None, served: str | None = None) -> str | None:
    """The endpoint a session pins: ``profile``'s first target, else the served / primary endpoint."""
    if profile is not None:
        chosen = result.profile_results.get(profile)
        return chosen.targets[0].endpoint.address if chosen is not None and chosen.targets else None
    return served or (result.endpoints[0].address if result.endpoints else None)


def _candidates(result: SchedulingResult, profile: str | None) -> tuple[str, ...] | None:
    """Addresses that reached scoring in ``profile`` (default: the primary one); None if unknown."""
    if result.decision is None:
        return None
    name = profile if profile is not None else result.primary_profile
    for decision in result.decision.profiles:
        if decision.profile == name:
            return decision.candidates
    return None


class SessionBindings:
    """session id -> endpoint address, bounded by :data:`MAX_SESSIONS` (LRU), expiring after ``ttl``.

    Expired bindings are swept from the oldest on :meth:`bind`, at most every ``sweep`` seconds
    (llm-d sweeps on a timer; a binding is still readable until swept, as there). Not thread-safe:
    used from the scheduler's hooks on the event-loop thread.
    """

    __slots__ = ("_bindings", "_last_sweep", "attributes", "headers", "sweep", "ttl")

    def __init__(self, config: SessionIdConfig) -> None:
        self.headers, self.ttl, self.sweep = config
        self.attributes: dict[str, AttributeReader] = {}  # attribute key -> its producer's reader
        self._bindings: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._last_sweep = 0.0

    def __len__(self) -> int:
        return len(self._bindings)

    def attribute_keys(self) -> tuple[str, ...]:
        """The attribute keys the sources read (``<name>/<producer>``)."""
        n = len(ATTRIBUTE_SOURCE)
        return tuple(h[n:] for h in self.headers if h.startswith(ATTRIBUTE_SOURCE))

    def session_id(self, request: LLMRequest) -> str:
        for source in self.headers:
            if source.startswith(ATTRIBUTE_SOURCE):
                reader = self.attributes.get(source[len(ATTRIBUTE_SOURCE) :])
                value = reader(request.headers).strip() if reader is not None else ""
            else:
                value = request.headers.get(source, "").strip()
            if value:
                return value
        return ""

    def bound(self, request: LLMRequest) -> str | None:
        session = self.session_id(request)
        entry = self._bindings.get(session) if session else None
        return entry[0] if entry is not None else None

    def bind(self, request: LLMRequest, result: SchedulingResult, profile: str | None, now: float) -> None:
        """After dispatch: bind, refresh, or move the session (only if its endpoint was not a candidate)."""
        session = self.session_id(request)
        address = picked_address(result, profile)
        if not session or address is None:
            return
        bindings = self._bindings
        existing = bindings.get(session)
        if existing is not None and existing[0] != address:
            candidates = _candidates(result, profile)
            if candidates is not None and existing[0] in candidates:
                return  # the bound endpoint was available but lost: keep the binding (llm-d)
        bindings[session] = (address, now)
        bindings.move_to_end(session)
        while len(bindings) > MAX_SESSIONS:
            bindings.popitem(last=False)
        if now - self._last_sweep >= self.sweep:
            self._last_sweep = now
            while bindings:
                oldest, (_, seen) = next(iter(bindings.items()))
                if now - seen <= self.ttl:
                    break
                del bindings[oldest]
