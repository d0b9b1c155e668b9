"""Registry: duplicates raise, factories validated, entry points discovered."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.interfaces import Handle, Plugin
from scheduler.plugins.base import PluginBase
from scheduler.registry import DuplicatePluginError, PluginRegistrationError, Registry, default_registry


class Custom(PluginBase):
    plugin_type = "custom-scorer"

    def score(self, cycle: Any, request: Any, endpoints: Any) -> list[float]:
        return [0.5 for _ in endpoints]


def custom_factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    return Custom(name)


@dataclass
class FakeEntryPoint:
    name: str
    value: str
    target: Any

    def load(self) -> Any:
        if isinstance(self.target, Exception):
            raise self.target
        return self.target


def test_builtin_types_present() -> None:
    registry = default_registry(entry_points=False)
    for t in ("queue-scorer", "kv-cache-utilization-scorer", "max-score-picker", "single-profile-handler"):
        assert t in registry


def test_duplicate_registration_raises() -> None:
    registry = Registry()
    registry.register("custom-scorer", custom_factory)
    with pytest.raises(DuplicatePluginError, match="'custom-scorer' is already registered by builtin"):
        registry.register("custom-scorer", custom_factory, origin="other")


@pytest.mark.parametrize(
    ("plugin_type", "factory", "message"),
    [
        ("", custom_factory, "invalid plugin type"),
        ("has space", custom_factory, "invalid plugin type"),
        ("ok", 42, "is not callable"),
        ("ok", lambda name: None, "must accept (name, parameters, handle)"),
    ],
)
def test_invalid_registrations(plugin_type: str, factory: Any, message: str) -> None:
    with pytest.raises(PluginRegistrationError) as info:
        Registry().register(plugin_type, factory)
    assert message in str(info.value)


def test_entry_points_registered_and_usable() -> None:
    registry = default_registry(entry_points=False)
    eps = [FakeEntryPoint("custom-scorer", "acme.plugins:custom_factory", custom_factory)]
    added = registry.load_entry_points(discover=lambda group: eps if group == "epp.plugins" else [])
    assert added == ["custom-scorer"]
    assert "entry point custom-scorer" in registry.origin("custom-scorer")
    plugin = registry.create("custom-scorer", "mine", {}, PluginHandle())
    assert (plugin.plugin_type, plugin.name) == ("custom-scorer", "mine")


def test_entry_point_clashing_with_builtin_is_rejected() -> None:
    registry = default_registry(entry_points=False)
    eps = [FakeEntryPoint("queue-scorer", "acme:f", custom_factory)]
    with pytest.raises(DuplicatePluginError, match="already registered by builtin"):
        registry.load_entry_points(discover=lambda group: eps)


def test_entry_point_failing_import_is_reported() -> None:
    eps = [FakeEntryPoint("broken", "acme:missing", ImportError("no module acme"))]
    with pytest.raises(PluginRegistrationError, match=r"broken = acme:missing.*cannot be loaded"):
        Registry().load_entry_points(discover=lambda group: eps)


def test_create_checks_type_and_name() -> None:
    registry = Registry()
    registry.register("other-type", custom_factory)
    with pytest.raises(ConfigError, match="expected a plugin with plugin_type 'other-type'"):
        registry.create("other-type", "x", {}, PluginHandle())
    with pytest.raises(ConfigError, match="unknown plugin type 'nope'"):
        registry.create("nope", "x", {}, PluginHandle())


def test_real_entry_point_object_is_loaded() -> None:
    # an importlib.metadata.EntryPoint pointing at a real module attribute (this test module)
    ep = importlib.metadata.EntryPoint(
        name="custom-scorer", value=f"{__name__}:custom_factory", group="epp.plugins"
    )
    registry = Registry()
    assert registry.load_entry_points(discover=lambda group: [ep]) == ["custom-scorer"]
    plugin = registry.create("custom-scorer", "x", {}, PluginHandle())
    assert isinstance(plugin, Custom)


def test_aliases_accept_older_type_names() -> None:
    registry = default_registry(entry_points=False)
    assert "kv-cache-scorer" in registry
    plugin = registry.create("kv-cache-scorer", "kv", {}, PluginHandle())
    assert plugin.plugin_type == "kv-cache-utilization-scorer"
    with pytest.raises(DuplicatePluginError):
        registry.register_alias("kv-cache-scorer", "queue-scorer")
    with pytest.raises(DuplicatePluginError):
        registry.register("kv-cache-scorer", custom_factory)
    with pytest.raises(PluginRegistrationError, match="unregistered type"):
        registry.register_alias("old-name", "no-such-type")


def test_gie_mid_2025_type_names_are_aliases() -> None:
    from scheduler.config import load_config_text

    text = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache
- type: queue
- type: kv-cache
- type: max-score
- type: single-profile
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache
  - pluginRef: queue
  - pluginRef: kv-cache
  - pluginRef: max-score
"""
    resolved = load_config_text(text)
    types = {p.plugin.name: p.plugin.plugin_type for p in resolved.plugins}
    assert types["prefix-cache"] == "prefix-cache-scorer" and types["max-score"] == "max-score-picker"
    assert types["single-profile"] == "single-profile-handler" and types["queue"] == "queue-scorer"
