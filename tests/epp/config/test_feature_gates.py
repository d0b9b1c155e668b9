"""featureGates: upstream's gate names, the ``name=false`` syntax, defaults, unknown gates rejected.

Cases follow llm-d-router ``pkg/epp/config/loader`` (validateFeatureGates / loadFeatureConfig and the
configloader_test.go table) and GIE's last EPP (``cmd/epp/runner/runner.go`` registers dataLayer,
enableLegacyMetrics, flowControl).
"""

from __future__ import annotations

from typing import Any

import pytest

from epp.config.feature_gates import (
    DATA_LAYER,
    FLOW_CONTROL,
    GATE_DEFAULTS,
    HA_POPULATE_NON_LEADER_DATASTORE,
    LEGACY_METRICS,
    parse_feature_gates,
)
from epp.config.sections import load_picker_config
from scheduler.errors import ConfigError


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (None, {}),
        ([], {}),
        (["flowControl=false"], {FLOW_CONTROL: False}),
        (["flowControl=FALSE"], {FLOW_CONTROL: False}),
        (["flowControl= 0 "], {FLOW_CONTROL: False}),
        (["dataLayer"], {DATA_LAYER: True}),
        (["enableLegacyMetrics=true"], {LEGACY_METRICS: True}),
        (["enableLegacyMetrics=T"], {LEGACY_METRICS: True}),
        (["haPopulateNonLeaderDatastore=false"], {HA_POPULATE_NON_LEADER_DATASTORE: False}),
        (["haPopulateNonLeaderDatastore=f", "haPopulateNonLeaderDatastore"], {}),  # later entries win
        (["dataLayer=1", "dataLayer=0"], {DATA_LAYER: False}),
    ],
)
def test_gates_parse_with_upstream_defaults(entries: Any, expected: dict[str, bool]) -> None:
    gates = parse_feature_gates(entries)
    assert dict(gates.values) == {**GATE_DEFAULTS, **expected}


def test_defaults_are_upstreams() -> None:
    gates = parse_feature_gates(None)
    assert (
        not gates.enabled(FLOW_CONTROL)
        and not gates.enabled(LEGACY_METRICS)
        and not gates.enabled(DATA_LAYER)
    )
    assert gates.enabled(HA_POPULATE_NON_LEADER_DATASTORE)  # llm-d-router registers it enabled
    assert parse_feature_gates(["haPopulateNonLeaderDatastore=false"]).set_explicitly == (
        HA_POPULATE_NON_LEADER_DATASTORE,
    )


@pytest.mark.parametrize(
    ("entries", "location", "message"),
    [
        ("flowControl", "featureGates", "expected a list"),
        ([3], "featureGates", "expected a list"),
        (
            ["prepareDataPlugins"],
            "featureGates[0]",
            "unknown feature gate 'prepareDataPlugins'",
        ),  # removed in GIE
        (["flowcontrol"], "featureGates[0]", "unknown feature gate"),  # names are case-sensitive
        ([" flowControl"], "featureGates[0]", "unknown feature gate"),  # and not trimmed
        (["dataLayer", "bogus=false"], "featureGates[1]", "unknown feature gate 'bogus'"),
        (["flowControl=maybe"], "featureGates[0]", "not a valid value"),
        (["flowControl="], "featureGates[0]", "not a valid value"),
    ],
)
def test_bad_gates_are_rejected_naming_the_entry(entries: Any, location: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_feature_gates(entries)
    assert err.value.location == location
    assert message in str(err.value)


_HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
_PLUGINS = (
    "plugins:\n- type: queue-scorer\n- name: metrics\n  type: metrics-data-source\n"
    "  parameters: {path: /prom}\n- type: core-metrics-extractor\n"
    "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
    "dataLayer:\n  sources:\n  - pluginRef: metrics\n    extractors:\n"
    "    - pluginRef: core-metrics-extractor\n"
    "  - pluginRef: models-data-source\n"
)


def test_enable_legacy_metrics_replaces_the_section_with_the_flag_driven_source() -> None:
    # GIE test/integration/epp/testdata/default-config.yaml sets `featureGates: [enableLegacyMetrics]`.
    plain = load_picker_config(None, _HEAD + _PLUGINS)
    assert [s.plugin.name for s in plain.data_layer.sources] == ["metrics", "models-data-source"]
    legacy = load_picker_config(None, _HEAD + "featureGates: [enableLegacyMetrics]\n" + _PLUGINS)
    assert legacy.feature_gates.enabled(LEGACY_METRICS)
    (metrics,) = legacy.data_layer.build_sources(metrics_path="/flag-path")
    assert metrics.plugin_type == "metrics-data-source" and metrics.path == "/flag-path"


def test_gates_reach_the_loaded_config() -> None:
    loaded = load_picker_config(None, _HEAD + 'featureGates: [dataLayer, "flowControl=false"]\n' + _PLUGINS)
    assert loaded.feature_gates.enabled(DATA_LAYER) and not loaded.feature_gates.enabled(FLOW_CONTROL)
    with pytest.raises(ConfigError, match="unknown"):
        load_picker_config(None, _HEAD + "featureGates: [experimentalPlugins]\n" + _PLUGINS)


def test_registered_gates_is_a_test_seam_only_active_inside_the_block() -> None:
    # the Go loader test's RegisterFeatureGate("test-feature-gate", true): default true, name=false works
    from epp.config.feature_gates import registered_gates

    with registered_gates({"test-feature-gate": True}):
        assert parse_feature_gates([]).enabled("test-feature-gate") is True
        gates = parse_feature_gates(["test-feature-gate=false"])
        assert gates.enabled("test-feature-gate") is False
        assert gates.set_explicitly == ("test-feature-gate",)
        with pytest.raises(ValueError, match="already registered"), registered_gates({"flowControl": True}):
            pass
    with pytest.raises(ConfigError, match="unknown feature gate 'test-feature-gate'"):
        parse_feature_gates(["test-feature-gate"])
