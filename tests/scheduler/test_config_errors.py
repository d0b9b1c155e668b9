# ruff: noqa: E501  (expected messages are kept on one line each so that they read as the user sees them)
"""Invalid configurations are rejected with messages naming the source, the location and the expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.config import load_config_file, load_config_text
from scheduler.errors import ConfigError

HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
PLUGINS = "plugins:\n- type: queue-scorer\n- type: max-score-picker\n- type: random-picker\n"

CASES = [
    # (id, document, expected message)
    ("empty", "", "<config-text>: empty configuration document"),
    ("yaml syntax", HEAD + "plugins: [\n", "<config-text>: invalid YAML at line"),
    (
        "duplicate key",
        HEAD + "plugins: []\nplugins: []\n",
        "invalid YAML at line 4, column 1: duplicate key 'plugins'",
    ),
    ("not a mapping", "- a\n", '<config-text>: (document): expected a mapping, got ["a"]'),
    (
        "api version",
        "apiVersion: v2\nkind: EndpointPickerConfig\n",
        'apiVersion: expected one of inference.networking.x-k8s.io/v1alpha1, llm-d.ai/v1alpha1, got "v2"',
    ),
    (
        "api version before any section (upstream's decoder fails on the group first)",
        "apiVersion: config.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n",
        'apiVersion: expected one of inference.networking.x-k8s.io/v1alpha1, llm-d.ai/v1alpha1, got "config.x-k8s.io/v1alpha1"',
    ),
    (
        "kind",
        "apiVersion: llm-d.ai/v1alpha1\nkind: Other\n",
        'kind: expected EndpointPickerConfig, got "Other"',
    ),
    (
        "unknown top-level field",
        HEAD + "plugin: []\n",
        '<config-text>: plugin: unknown field; did you mean "plugins"? (allowed: apiVersion,',
    ),
    (
        "section without validator",
        HEAD + "dataLayer: {sources: []}\n",
        "dataLayer: section not supported yet (no validator is registered for it in this build)",
    ),
    ("plugins not a list", HEAD + "plugins: {type: x}\n", 'plugins: expected a list, got {"type": "x"}'),
    (
        "unknown plugin field",
        HEAD + "plugins:\n- type: queue-scorer\n  params: {}\n",
        'plugins[0].params: unknown field; did you mean "parameters"? (allowed: name, type, parameters)',
    ),
    (
        "missing type",
        HEAD + "plugins:\n- name: x\n",
        "plugins[0].type: required field missing: expected a plugin type",
    ),
    (
        "unknown type",
        HEAD + "plugins:\n- type: magic-scorer\n",
        'plugins[0].type: unknown plugin type "magic-scorer" (known:',
    ),
    (
        "duplicate name",
        HEAD + "plugins:\n- type: queue-scorer\n- type: queue-scorer\n",
        'plugins[1].name: duplicate plugin name "queue-scorer" (already declared at plugins[0])',
    ),
    (
        "bad parameter value",
        HEAD + "plugins:\n- type: queue-scorer\n- name: p\n  type: max-score-picker\n  parameters:\n"
        "    maxNumOfEndpoints: two\n",
        'plugins[1] (max-score-picker "p"): parameters.maxNumOfEndpoints: expected an integer >= 1, got "two"',
    ),
    (
        "unknown parameter",
        HEAD + "plugins:\n- type: prefix-cache-scorer\n  parameters:\n    blockSizeToken: 16\n",
        'plugins[0] (prefix-cache-scorer "prefix-cache-scorer"): parameters.blockSizeToken: unknown parameter',
    ),
    (
        "parameter on parameterless plugin",
        HEAD + "plugins:\n- type: queue-scorer\n  parameters: {x: 1}\n",
        'plugins[0] (queue-scorer "queue-scorer"): parameters.x: unknown parameter (queue-scorer takes no parameters)',
    ),
    (
        "memory budget",
        HEAD + "plugins:\n- type: prefix-cache-scorer\n  parameters: {lruCapacityPerServer: 100000000}\n",
        'plugins[0] (prefix-cache-scorer "prefix-cache-scorer"): parameters: lruCapacityPerServer 100000000 x ~150 '
        "bytes per entry",
    ),
    (
        "dangling pluginRef",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n"
        "  - pluginRef: kv-scorer\n",
        'schedulingProfiles[0].plugins[1].pluginRef: no plugin named "kv-scorer" (declared: queue-scorer, '
        "max-score-picker, random-picker)",
    ),
    (
        "two pickers",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: max-score-picker\n"
        "  - pluginRef: queue-scorer\n  - pluginRef: random-picker\n",
        'schedulingProfiles[0].plugins[2].pluginRef: profile "a" already has picker max-score-picker '
        '"max-score-picker" (schedulingProfiles[0].plugins[0].pluginRef); a profile takes exactly one picker',
    ),
    (
        "two pickers in the implicit default profile",
        HEAD + PLUGINS,
        'schedulingProfiles (default): profile "default" already has picker max-score-picker',
    ),
    (
        "two profile handlers",
        HEAD + "plugins:\n- type: single-profile-handler\n- name: h2\n  type: disagg-profile-handler\n",
        'plugins[1]: second profile handler disagg-profile-handler "h2" (the first is single-profile-handler '
        '"single-profile-handler" at plugins[0]): a configuration takes exactly one profile handler',
    ),
    (
        "single handler with two profiles",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n  plugins: [{pluginRef: queue-scorer}]\n"
        "- name: b\n  plugins: [{pluginRef: queue-scorer}]\n",
        'schedulingProfiles: single-profile-handler "single-profile-handler" routes exactly one profile, got 2 '
        "(a, b)",
    ),
    (
        "duplicate profile",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n- name: a\n",
        'schedulingProfiles[1].name: duplicate profile name "a" (already declared at schedulingProfiles[0])',
    ),
    (
        "plugin twice in a profile",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n"
        "  - pluginRef: queue-scorer\n",
        'schedulingProfiles[0].plugins[1].pluginRef: plugin "queue-scorer" is already used in this profile at '
        "schedulingProfiles[0].plugins[0]",
    ),
    (
        "bad weight",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n"
        "    weight: heavy\n",
        'schedulingProfiles[0].plugins[0].weight: expected a finite number, got "heavy"',
    ),
    (
        "weight on a picker",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: random-picker\n"
        "    weight: 2\n",
        'schedulingProfiles[0].plugins[0].weight: random-picker "random-picker" is not a scorer, so it takes no weight',
    ),
    (
        "weight on a plugin that is not a scorer",
        HEAD + "plugins:\n- type: single-profile-handler\nschedulingProfiles:\n- name: a\n  plugins:\n"
        "  - pluginRef: single-profile-handler\n    weight: 2\n",
        "schedulingProfiles[0].plugins[0].weight: single-profile-handler",
    ),
    (
        "unknown profile field",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n  filters: []\n",
        "schedulingProfiles[0].filters: unknown field (allowed: name, plugins, shadow)",
    ),
    (
        "missing pluginRef",
        HEAD + PLUGINS + "schedulingProfiles:\n- name: a\n  plugins:\n  - weight: 1\n",
        "schedulingProfiles[0].plugins[0].pluginRef: required field missing",
    ),
    (
        "all shadow",
        HEAD
        + PLUGINS
        + "schedulingProfiles:\n- name: a\n  shadow: true\n  plugins: [{pluginRef: queue-scorer}]\n",
        "schedulingProfiles: every profile is shadow",
    ),
    (
        "saturation detector ref to non-detector",
        HEAD + PLUGINS + "saturationDetector:\n  pluginRef: queue-scorer\n",
        'saturationDetector.pluginRef: queue-scorer "queue-scorer" is not a saturation detector',
    ),
    (
        "saturation detector dangling",
        HEAD + "saturationDetector:\n  pluginRef: nope\n",
        'saturationDetector.pluginRef: no plugin named "nope"',
    ),
    (
        "saturation detector bad legacy value",
        HEAD + "saturationDetector:\n  kvCacheUtilThreshold: 2\n",
        'saturationDetector: (utilization-detector "utilization-detector"): parameters.kvCacheUtilThreshold: '
        "expected a number > 0 and <= 1, got 2",
    ),
    (
        "saturation detector both forms",
        HEAD
        + "plugins:\n- type: utilization-detector\nsaturationDetector:\n  pluginRef: utilization-detector\n"
        "  queueDepthThreshold: 3\n",
        "saturationDetector.queueDepthThreshold: give either pluginRef or the threshold fields",
    ),
]


@pytest.mark.parametrize(("document", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_config_is_rejected_with_precise_message(document: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(document)
    assert message in str(info.value)


def test_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "epp.yaml"
    path.write_text(HEAD + "schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: ghost\n")
    with pytest.raises(ConfigError) as info:
        load_config_file(path)
    assert str(info.value).startswith(
        f'{path}: schedulingProfiles[0].plugins[0].pluginRef: no plugin named "ghost"'
    )
    assert info.value.source == str(path)
    assert info.value.location == "schedulingProfiles[0].plugins[0].pluginRef"


def test_reserved_section_validators_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot replace scheduler-owned fields"):
        load_config_text(HEAD, sections={"plugins": lambda value, location: value})


def test_a_plugin_without_a_scheduling_role_in_a_profile_is_ignored_there(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As upstream's SchedulerProfile.AddPlugins: only the filter/scorer/picker interfaces count; a
    handler (or a parser, a reporter) listed in a profile is skipped there, with a warning."""
    text = (
        HEAD + "plugins:\n- type: single-profile-handler\n- type: queue-scorer\nschedulingProfiles:\n"
        "- name: a\n  plugins:\n  - pluginRef: single-profile-handler\n  - pluginRef: queue-scorer\n"
    )
    with caplog.at_level("WARNING", logger="scheduler.config"):
        resolved = load_config_text(text)
    profile = resolved.profiles["a"]
    assert [s.plugin_type for s, _ in profile.scorers] == ["queue-scorer"]
    assert profile.picker is not None and not profile.filters
    assert "has no role in profile 'a'" in caplog.text
