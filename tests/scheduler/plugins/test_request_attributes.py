"""agent-identity and session-id-producer, and session affinity reading their attributes.

Tables ported from llm-d-router (commit ebab68792):
pkg/epp/framework/plugins/requestcontrol/requestheader/agentidentity/agent_identity_test.go
(TestRequestHeader, TestPluginFactory) and
pkg/epp/framework/plugins/requestcontrol/dataproducer/sessionid/producer_test.go (TestFactory,
TestProduce_HeaderMode, TestProduce_CookieMode).
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.config import load_config_text
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.session_affinity import SessionAffinityFilter
from scheduler.plugins.request_attributes import (
    DEFAULT_AGENT_HEADERS,
    AgentIdentity,
    SessionIdProducer,
    agent_identity_factory,
    session_id_factory,
)
from scheduler.types import LLMRequest

CLAUDE, OPENCODE, CODEX, CODEX_OLD = DEFAULT_AGENT_HEADERS


def agent(parameters: Any = None) -> AgentIdentity:
    plugin = agent_identity_factory("agent-identity", parameters or {}, PluginHandle())
    assert isinstance(plugin, AgentIdentity)
    return plugin


@pytest.mark.parametrize(
    ("headers", "identity"),
    [
        ({CLAUDE: "session-abc"}, "session-abc"),
        ({OPENCODE: "oc-session-1"}, "oc-session-1"),
        ({CODEX: "codex-session-1"}, "codex-session-1"),
        ({CODEX_OLD: "codex-legacy-1"}, "codex-legacy-1"),
        ({CODEX: "codex-new", CODEX_OLD: "codex-old"}, "codex-new"),
        ({CLAUDE: "session-abc", OPENCODE: "oc-session-1"}, "session-abc"),
        ({OPENCODE: "oc-session-1", CODEX: "codex-session-1"}, "oc-session-1"),
        ({"x-unrelated": "value"}, ""),
        ({}, ""),
        ({CLAUDE: ""}, ""),
    ],
)
def test_agent_identity_headers(headers: dict[str, str], identity: str) -> None:
    assert agent().attribute(headers) == identity


@pytest.mark.parametrize(
    ("parameters", "order"),
    [
        (None, DEFAULT_AGENT_HEADERS),
        ({"additionalSessionHeaders": []}, DEFAULT_AGENT_HEADERS),
        ({"additionalSessionHeaders": ["x-custom-1", "X-Custom-2"]}, ("x-custom-1", "x-custom-2")),
    ],
)
def test_agent_identity_additional_headers_come_first(parameters: Any, order: tuple[str, ...]) -> None:
    plugin = agent(parameters)
    headers = {h: f"v-{h}" for h in (*order, *DEFAULT_AGENT_HEADERS)}
    assert plugin.attribute(headers) == f"v-{order[0]}"


@pytest.mark.parametrize(
    "bad", [{"additionalSessionHeaders": "x"}, {"additionalSessionHeaders": [1]}, {"x": 1}]
)
def test_agent_identity_rejects_bad_parameters(bad: Any) -> None:
    with pytest.raises(ConfigError, match="agent-identity"):
        agent_identity_factory("agent-identity", bad, PluginHandle())


@pytest.mark.parametrize(
    ("parameters", "error"),
    [
        ({"headerName": "x-session-id"}, None),
        ({"cookieName": "llm-d-session"}, None),
        ({"headerName": " X-Session-ID "}, None),
        ({}, "requires exactly one of headerName or cookieName"),
        ({"headerName": "x", "cookieName": "y"}, "not both"),
        ({"headerName": "", "cookieName": ""}, "requires exactly one of headerName or cookieName"),
        ({"headerName": "x", "other": "y"}, "parameters.other"),
        ("not-json", "expected a mapping"),
    ],
)
def test_session_id_producer_factory(parameters: Any, error: str | None) -> None:
    if error is None:
        assert isinstance(session_id_factory("p", parameters, PluginHandle()), SessionIdProducer)
    else:
        with pytest.raises(ConfigError, match=error):
            session_id_factory("p", parameters, PluginHandle())


@pytest.mark.parametrize(
    ("headers", "want"),
    [
        ({"x-session-id": "user-42"}, "user-42"),
        ({"x-session-id": "  user-42  "}, "user-42"),
        ({"other": "irrelevant"}, ""),
        ({"x-session-id": ""}, ""),
    ],
)
def test_session_id_producer_header_mode(headers: dict[str, str], want: str) -> None:
    plugin = session_id_factory("p", {"headerName": " X-Session-ID "}, PluginHandle())
    assert isinstance(plugin, SessionIdProducer)
    assert plugin.attribute(headers) == want
    assert plugin.produced_keys() == frozenset({"SessionID/p"})


@pytest.mark.parametrize(
    ("cookie", "want"),
    [
        ("llm-d-session=abc123", "abc123"),
        ("csrf=xyz; llm-d-session=abc123; theme=dark", "abc123"),
        ("csrf=xyz; theme=dark", ""),
        ("", ""),
        ("no-equals; llm-d-session=abc", "abc"),
    ],
)
def test_session_id_producer_cookie_mode(cookie: str, want: str) -> None:
    plugin = session_id_factory("p", {"cookieName": "llm-d-session"}, PluginHandle())
    assert isinstance(plugin, SessionIdProducer)
    assert plugin.attribute({"cookie": cookie}) == want


CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
%s
- type: session-affinity-filter
  parameters:
    strategy: session_id
    sessionIdConfig:
      sources:
      - {attribute: SessionID, producer: cookies}
      - {attribute: agent-identity}
      - {header: x-session-id}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: session-affinity-filter}, {pluginRef: queue-scorer}]
"""
PRODUCERS = """- type: agent-identity
- type: session-id-producer
  name: cookies
  parameters: {cookieName: sid}"""


def session_filter(producers: str) -> SessionAffinityFilter:
    resolved = load_config_text(CONFIG % producers)
    found = next(p.plugin for p in resolved.plugins if isinstance(p.plugin, SessionAffinityFilter))
    assert isinstance(found, SessionAffinityFilter)
    return found


def session_of(plugin: SessionAffinityFilter, headers: dict[str, str]) -> str:
    assert plugin.bindings is not None
    return plugin.bindings.session_id(
        LLMRequest(request_id="r", model="m", target_model="m", headers=headers)
    )


def test_session_sources_read_the_producers_attributes_in_order() -> None:
    plugin = session_filter(PRODUCERS)
    everything = {"cookie": "a=1; sid=from-cookie", CLAUDE: "from-agent", "x-session-id": "from-header"}
    assert session_of(plugin, everything) == "from-cookie"
    assert session_of(plugin, {CLAUDE: "from-agent", "x-session-id": "from-header"}) == "from-agent"
    assert session_of(plugin, {"x-session-id": "from-header"}) == "from-header"
    assert session_of(plugin, {}) == ""


def test_attributes_nobody_publishes_yield_nothing() -> None:
    plugin = session_filter("")  # loads, as upstream: a missing attribute is no session preference
    assert session_of(plugin, {"cookie": "sid=x", CLAUDE: "y"}) == ""
    assert session_of(plugin, {"cookie": "sid=x", "x-session-id": "h"}) == "h"
    other = session_filter("- type: session-id-producer\n  name: other\n  parameters: {headerName: h}")
    assert session_of(other, {"h": "v"}) == ""  # SessionID of another producer instance


def test_session_id_config_renders_and_reloads() -> None:
    """check-config output loads back to the same plugins (sessionIdConfig rendered as YAML, not a list)."""
    resolved = load_config_text(CONFIG % PRODUCERS)
    rendered = resolved.render()
    assert "- attribute: SessionID\n" in rendered and "producer: cookies" in rendered
    assert "- header: x-session-id" in rendered
    again = load_config_text(rendered)
    assert again.render() == rendered
    found = next(p.plugin for p in again.plugins if isinstance(p.plugin, SessionAffinityFilter))
    assert session_of(found, {"cookie": "sid=abc"}) == "abc"  # still bound after the round trip
