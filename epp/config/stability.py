"""Plugin stability levels: llm-d-router's Alpha plugin types need ``--allow-experimental-plugins``.

llm-d-router registers each plugin type with a stability level and refuses to start when a configured
plugin's type is Alpha and ``--allow-experimental-plugins`` is not set. The gate applies here to
configurations written for llm-d-router, ``apiVersion: llm-d.ai/...``; files with the older
``inference.networking.x-k8s.io`` apiVersion come from GIE and llm-d-inference-scheduler too, whose
binaries have no such gate, so those load as there.

:data:`ALPHA_PLUGIN_TYPES` is llm-d-router's list (``cmd/epp/runner/runner.go``, registrations with
``StabilityAlpha``); a type missing from this build's registry fails earlier as an unknown type.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ALPHA_PLUGIN_TYPES", "experimental_plugin_error"]

ALPHA_PLUGIN_TYPES = frozenset(
    {
        "agent-identity",
        "burst-prefix-cache-producer",
        "dcgm-data-source",
        "dcgm-extractor",
        "disaggregatedset-rollout-screener",
        "endpoint-attribute-filter",
        "endpoint-attribute-scorer",
        "header-label-affinity-scorer",
        "header-profile-handler",
        "multicluster-approx-prefix-cache-producer",
        "multicluster-file-discovery",
        "multicluster-kv-cache-utilization-scorer",
        "multicluster-metrics-data-source",
        "multicluster-metrics-extractor",
        "multicluster-prefix-cache-scorer",
        "multicluster-queue-scorer",
        "multicluster-session-affinity-filter",
        "p2p-source-producer",
        "priority-holdback-policy",
        "priority-then-time-eviction-order-policy",
        "session-affinity-filter",
        "session-affinity-scorer",
        "sheddable-eviction-filter",
        "soft-reflective-ceiling-policy",
        "topology-affinity-filter",
        "topology-affinity-scorer",
        "topology-extractor",
        "utilization-filter",
    }
)

_GATED_API_PREFIX = "llm-d.ai/"


def experimental_plugin_error(
    api_version: str, plugins: Iterable[tuple[str, str]], *, allowed: bool
) -> str | None:
    """The startup error for the first Alpha plugin (by name) of a llm-d.ai configuration, or None.

    ``plugins`` are (name, type) pairs of the configured plugins.
    """
    if allowed or not api_version.startswith(_GATED_API_PREFIX):
        return None
    for name, plugin_type in sorted(plugins):
        if plugin_type in ALPHA_PLUGIN_TYPES:
            return (
                f"plugin '{name}' (type: '{plugin_type}') has Alpha stability level, but command line flag "
                "--allow-experimental-plugins is not set"
            )
    return None
