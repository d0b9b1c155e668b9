"""Request attributes derived from headers: ``agent-identity`` and ``session-id-producer`` (llm-d-router).

Both publish one string attribute per request, computed from its headers (pure, no state):

* ``agent-identity`` publishes ``agent-identity``: the first non-empty value among
  ``additionalSessionHeaders`` (in order, lower-cased) then ``x-claude-code-session-id`` (Claude Code),
  ``x-session-affinity`` (OpenCode), ``session-id`` and ``session_id`` (Codex). Readers: the EPP's
  fairness id (when the request has no explicit fairness-id header, the identity becomes its fairness
  id, which labels its metrics, as upstream's director) and session-affinity sources
  ``{attribute: agent-identity}``.
* ``session-id-producer`` publishes ``SessionID`` under its instance name: the trimmed value of the
  header ``headerName`` (lower-cased), or of the cookie ``cookieName`` in the ``cookie`` header —
  exactly one of the two. Readers: session-affinity sources
  ``{attribute: SessionID, producer: <instance name>}``.

A request without the headers has no attribute (readers then see nothing). Attribute keys follow
:func:`scheduler.producers.data_key`: ``agent-identity/`` (no producer name, as upstream's key) and
``SessionID/<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin
from scheduler.params import param, plugin_location
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.producers import data_key

__all__ = [
    "AGENT_IDENTITY",
    "AgentIdentity",
    "RequestAttributeProducer",
    "SessionIdProducer",
    "agent_identity_factory",
    "session_id_factory",
]

AGENT_IDENTITY = "agent-identity"
SESSION_ID = "SessionID"
DEFAULT_AGENT_HEADERS = ("x-claude-code-session-id", "x-session-affinity", "session-id", "session_id")


@runtime_checkable
class RequestAttributeProducer(Plugin, Protocol):
    def produced_keys(self) -> frozenset[str]: ...

    def attribute(self, headers: Mapping[str, str]) -> str:
        """The attribute's value for a request with ``headers`` ("" when it has none). Pure."""
        ...


def _header_list(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple) or not all(isinstance(h, str) for h in raw):
        raise ValueError("expected a list of header names")
    return tuple(h.lower() for h in raw)


@dataclass(frozen=True, slots=True)
class AgentIdentityParams:
    additional_session_headers: tuple[str, ...] = param(
        (), convert=_header_list, expect="a list of header names"
    )


class AgentIdentity(PluginBase):
    plugin_type = "agent-identity"
    params: AgentIdentityParams

    def __init__(self, name: str, params: AgentIdentityParams) -> None:
        super().__init__(name)
        self.params = params
        self._headers = params.additional_session_headers + DEFAULT_AGENT_HEADERS

    def produced_keys(self) -> frozenset[str]:
        return frozenset({data_key(AGENT_IDENTITY, "")})

    def attribute(self, headers: Mapping[str, str]) -> str:
        for header in self._headers:
            value = headers.get(header)
            if value:
                return value
        return ""


def _build_agent(name: str, params: AgentIdentityParams, handle: Handle) -> AgentIdentity:
    return AgentIdentity(name, params)


agent_identity_factory = factory_with_params(AgentIdentity.plugin_type, AgentIdentityParams, _build_agent)


@dataclass(frozen=True, slots=True)
class SessionIdParams:
    header_name: str = param("")
    cookie_name: str = param("")


class SessionIdProducer(PluginBase):
    plugin_type = "session-id-producer"
    params: SessionIdParams

    def __init__(self, name: str, params: SessionIdParams) -> None:
        super().__init__(name)
        self.params = params
        self._header = params.header_name.strip().lower()
        self._cookie = params.cookie_name.strip()

    def produced_keys(self) -> frozenset[str]:
        return frozenset({data_key(SESSION_ID, self.name)})

    def attribute(self, headers: Mapping[str, str]) -> str:
        if self._header:
            return headers.get(self._header, "").strip()
        return _cookie(headers.get("cookie", ""), self._cookie).strip()


def _cookie(header: str, name: str) -> str:
    for pair in header.split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key == name:
            return value
    return ""


def _build_session(name: str, params: SessionIdParams, handle: Handle) -> SessionIdProducer:
    header, cookie = params.header_name.strip(), params.cookie_name.strip()
    if bool(header) == bool(cookie):
        both = ", not both" if header else ""
        raise ConfigError(
            f"'session-id-producer' requires exactly one of headerName or cookieName to be set{both}",
            location=f"{plugin_location(SessionIdProducer.plugin_type, name)}: parameters",
        )
    return SessionIdProducer(name, params)


session_id_factory = factory_with_params(SessionIdProducer.plugin_type, SessionIdParams, _build_session)
