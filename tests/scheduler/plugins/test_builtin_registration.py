"""Every plugin type of this area is registered and builds with default parameters."""

import pytest

from scheduler.handle import PluginHandle
from scheduler.plugins import register_builtin
from scheduler.registry import Registry

TYPES = [
    "running-requests-size-scorer",
    "lora-affinity-scorer",
    "load-aware-scorer",
    "active-request-scorer",
    "token-load-scorer",
    "session-affinity-scorer",
    "binpack-scorer",
    "spread-scorer",
    "label-selector-filter",
    "ready-filter",
    "lora-fit-filter",
    "header-based-testing-filter",
    "prefill-filter",
    "decode-filter",
    "utilization-detector",
    "concurrency-detector",
    "always-disagg-pd-decider",
    "disagg-profile-handler",
    "no-hit-lru-scorer",
    "kv-headroom-filter",
    "prefix-cache-affinity-filter",
    "prefix-based-pd-decider",
    "least-queue-filter",
    "least-kv-cache-filter",
    "low-queue-filter",
    "lora-affinity-filter",
    "by-label-selector",
    "encode-filter",
    "destination-endpoint-served-verifier",
    "always-disagg-multimodal-decider",
    "disagg-headers-handler",
    "prefill-header-handler",
    "data-parallel-profile-handler",
    "header-profile-handler",
    "session-affinity-filter",
    "context-length-aware",
    "probabilistic-admitter",
    "topology-extractor",
    "topology-affinity-filter",
    "topology-affinity-scorer",
    "p2p-source-producer",
]


@pytest.mark.parametrize("plugin_type", TYPES)
def test_registered_with_defaults(plugin_type: str) -> None:
    registry = Registry()
    register_builtin(registry)
    plugin = registry.create(plugin_type, "p", {}, PluginHandle())
    assert plugin.plugin_type == plugin_type and plugin.name == "p"


def test_by_label_requires_its_label() -> None:
    registry = Registry()
    register_builtin(registry)
    plugin = registry.create("by-label", "b", {"label": "tier"}, PluginHandle())
    assert plugin.plugin_type == "by-label"


EXAMPLE_PARAMETERS: dict[str, dict[str, object]] = {
    "label-selector-filter": {
        "matchLabels": {"a": "b"},
        "matchExpressions": [{"key": "c", "operator": "Exists"}],
    },
    "by-label-selector": {"matchLabels": {"a": "b"}},
    "by-label": {"label": "tier", "validValues": ["x"], "allowsNoLabel": True},
    "disagg-profile-handler": {"profiles": {"decode": "d", "prefill": "p"}, "primaryPort": 8200},
    "session-affinity-scorer": {"headerName": "x-s", "profileName": "prefill"},
    "token-load-scorer": {"queueThresholdTokens": 100},
}


@pytest.mark.parametrize("plugin_type", [*TYPES, "by-label"])
def test_rendered_parameters_load_back(plugin_type: str) -> None:
    """``params_to_dict`` (what the resolved configuration renders) parses back to the same parameters."""
    from scheduler.params import params_to_dict

    registry = Registry()
    register_builtin(registry)
    for parameters in ({}, EXAMPLE_PARAMETERS.get(plugin_type, {})):
        if plugin_type == "by-label" and not parameters:
            continue
        plugin = registry.create(plugin_type, "p", parameters, PluginHandle())
        if plugin.params is None:  # type: ignore[attr-defined]
            continue
        rendered = params_to_dict(plugin.params)  # type: ignore[attr-defined]
        again = registry.create(plugin_type, "p", rendered, PluginHandle())
        assert again.params == plugin.params  # type: ignore[attr-defined]
