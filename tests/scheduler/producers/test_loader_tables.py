"""Loader cases ported from llm-d-router pkg/epp/config/loader/configloader_test.go (commit ebab68792):
TestPluginsWithDependencies (plugins may name plugins declared after them; a reference cycle is an
error) and TestLoadRawConfiguration's "using deprecated Groupname" (the legacy apiVersion decodes into
the same configuration)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from scheduler.config import load_config_text
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin
from scheduler.plugins.base import PluginBase
from scheduler.registry import default_registry


class _Needs(PluginBase):
    plugin_type = "test-needs"

    def score(self, cycle: Any, request: Any, endpoints: Any) -> list[float]:
        return [0.0] * len(endpoints)


def _needs(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    for ref in parameters.get("refs", []):
        try:
            handle.plugin(ref)
        except KeyError:
            raise ConfigError(
                f"no plugin named {ref!r}", location=f'(test-needs "{name}"): parameters.refs'
            ) from None
    return _Needs(name)


def registry() -> Any:
    reg = default_registry()
    reg.register("test-needs", _needs, origin="test")
    return reg


HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
CASES = {
    "pluginsInOrder": (
        "- {name: a, type: test-needs}\n- {name: b, type: test-needs, parameters: {refs: [a]}}\n",
        None,
    ),
    "pluginsOutOfOrder": (
        "- {name: b, type: test-needs, parameters: {refs: [a]}}\n- {name: a, type: test-needs}\n",
        None,
    ),
    "pluginsRefedInNesting": (
        "- {name: c, type: test-needs, parameters: {refs: [b]}}\n"
        "- {name: b, type: test-needs, parameters: {refs: [a]}}\n"
        "- {name: a, type: test-needs}\n",
        None,
    ),
    "errorPluginsRefedInLoop": (
        "- {name: a, type: test-needs, parameters: {refs: [b]}}\n"
        "- {name: b, type: test-needs, parameters: {refs: [a]}}\n",
        "plugins[0]",
    ),
    "errorUndeclared": ("- {name: a, type: test-needs, parameters: {refs: [zz]}}\n", "plugins[0]"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_plugins_with_dependencies(case: str) -> None:
    plugins, error_at = CASES[case]
    text = HEAD + "plugins:\n" + plugins
    if error_at is None:
        resolved = load_config_text(text, registry=registry())
        order = [r.plugin.name for r in resolved.plugins if not r.implicit]
        assert sorted(order) == sorted(line.split("name: ")[1].split(",")[0] for line in plugins.splitlines())
        for line in plugins.splitlines():  # a referenced plugin is built (and ordered) before its user
            name = line.split("name: ")[1].split(",")[0]
            for ref in line.split("refs: [")[1].split("]")[0].split(", ") if "refs: [" in line else ():
                assert order.index(ref) < order.index(name)
    else:
        with pytest.raises(ConfigError) as err:
            load_config_text(text, registry=registry())
        assert (err.value.location or "").startswith(error_at)


def test_deprecated_group_name_loads_the_same() -> None:
    body = (
        "kind: EndpointPickerConfig\nplugins:\n- {type: queue-scorer}\n"
        "- {type: kv-cache-utilization-scorer}\n- {type: max-score-picker}\n"
        "schedulingProfiles:\n- name: default\n  plugins:\n"
        "  - {pluginRef: queue-scorer, weight: 2}\n  - {pluginRef: kv-cache-utilization-scorer}\n"
    )
    old = load_config_text("apiVersion: inference.networking.x-k8s.io/v1alpha1\n" + body).to_dict()
    new = load_config_text("apiVersion: llm-d.ai/v1alpha1\n" + body).to_dict()
    assert old.pop("apiVersion") != new.pop("apiVersion")
    assert old == new
