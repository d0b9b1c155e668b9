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
