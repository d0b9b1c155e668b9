"""Plugin roles are explicit where method names are ambiguous (scheduler.roles).

A flow-control policy with a ``pick()`` method once matched the Picker protocol and silently became the
picker of every profile that listed it. Now a plugin whose methods match roles of two kinds is refused
unless it declares ``plugin_roles``; a declaration is checked and decides how the framework slots it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest

from scheduler.config.loader import load_config_text
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.interfaces import Filter, Handle, Picker, Plugin, PrepareHook, SaturationDetector, Scorer
from scheduler.plugins.base import PluginBase
from scheduler.plugins.flowcontrol.interfaces import FairnessPolicy
from scheduler.registry import Registry, default_registry
from scheduler.roles import check_roles, has_role


class _FairnessWithPick(PluginBase):
    """A fairness policy whose per-band helper is named like the Picker extension point."""

    plugin_type = "pick-fairness"

    def new_state(self, ordering: Any) -> Any:
        return None

    def pick(self, cycle: Any, request: Any, scored: Sequence[Any]) -> Sequence[Any]:
        raise AssertionError("not a picker: must never be called by a profile")


class _DeclaredFairness(_FairnessWithPick):
    plugin_type = "declared-fairness"
    plugin_roles: ClassVar[tuple[type, ...]] = (FairnessPolicy,)


class _FilterWithScore(PluginBase):
    plugin_type = "filter-with-score"
    plugin_roles: ClassVar[tuple[type, ...]] = (Filter,)

    def filter(self, cycle: Any, request: Any, endpoints: Sequence[Any]) -> Sequence[Any]:
        return endpoints

    def score(self, cycle: Any, request: Any, endpoints: Sequence[Any]) -> list[float]:
        raise AssertionError("declared a filter only: never scored")


def _registry(*plugins: type[PluginBase]) -> Registry:
    registry = default_registry(entry_points=False)
    for cls in plugins:

        def factory(name: str, parameters: Mapping[str, Any], handle: Handle, cls: Any = cls) -> Plugin:
            plugin: Plugin = cls(name)
            return plugin

        registry.register(cls.plugin_type, factory, origin=f"test {cls.__name__}")
    return registry


def _config(plugin_type: str, registry: Registry, weight: str = "") -> Any:
    text = f"""
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: {plugin_type}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: {plugin_type}{weight}
"""
    return load_config_text(text, registry=registry)


def test_an_undeclared_plugin_matching_two_kinds_of_role_is_refused() -> None:
    registry = _registry(_FairnessWithPick)
    with pytest.raises(ConfigError) as caught:
        registry.create("pick-fairness", "f", {}, PluginHandle())
    message = str(caught.value)
    assert "picker (Picker)" in message and "fairness policy (FairnessPolicy)" in message
    assert "plugin_roles = (Picker, FairnessPolicy,)" in message and "test _FairnessWithPick" in message
    assert caught.value.location is not None and "pick-fairness" in caught.value.location
    with pytest.raises(ConfigError, match="plugin_roles"):  # also when a configuration declares it
        _config("pick-fairness", registry)


def test_a_declared_fairness_policy_is_not_a_picker_in_a_profile(caplog: pytest.LogCaptureFixture) -> None:
    config = _config("declared-fairness", _registry(_DeclaredFairness))
    plugin = config.plugin("declared-fairness")
    assert isinstance(plugin, Picker)  # its methods still match...
    assert not has_role(plugin, Picker) and has_role(plugin, FairnessPolicy)  # ...its declaration rules
    profile = config.profiles["default"]
    assert profile.picker.plugin_type == "max-score-picker"  # the implicit default, not the policy
    assert "has no role in profile" in caplog.text


def test_a_declaration_limits_the_roles_within_one_kind() -> None:
    registry = _registry(_FilterWithScore)
    config = _config("filter-with-score", registry)
    plugin = config.plugin("filter-with-score")
    assert plugin in config.profiles["default"].filters
    assert all(scorer is not plugin for scorer, _ in config.profiles["default"].scorers)
    with pytest.raises(ConfigError, match="is not a scorer, so it takes no weight"):
        _config("filter-with-score", registry, weight="\n    weight: 2")


class _DeclaresAHook(PluginBase):
    plugin_type = "declares-a-hook"
    plugin_roles: ClassVar[tuple[type, ...]] = (PrepareHook,)

    def prepare(self, cycle: Any, request: Any, endpoints: Any) -> None:
        return None


class _DeclaresWhatItLacks(PluginBase):
    plugin_type = "declares-what-it-lacks"
    plugin_roles: ClassVar[tuple[type, ...]] = (Scorer,)


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (_DeclaresAHook, "names 'PrepareHook', which is not a role"),
        (_DeclaresWhatItLacks, "declares scorer \\(Scorer\\), but the plugin lacks its methods"),
    ],
)
def test_a_wrong_declaration_is_refused(cls: type[PluginBase], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_roles(cls("p"))


def test_every_builtin_plugin_has_unambiguous_roles() -> None:
    """The two detectors that also filter declare both roles; the rest match one kind (the corpus
    tests build every plugin with its parameters; here those that need none)."""
    registry = default_registry(entry_points=False)
    built = 0
    for plugin_type in registry.types():
        try:
            registry.create(plugin_type, plugin_type, {}, PluginHandle())
        except ConfigError as exc:
            assert "plugin_roles" not in str(exc), exc
            continue
        built += 1
    assert built > 50
    for plugin_type in ("utilization-detector", "concurrency-detector"):
        plugin = registry.create(plugin_type, plugin_type, {}, PluginHandle())
        assert has_role(plugin, Filter) and has_role(plugin, SaturationDetector)
        assert not has_role(plugin, Scorer)
