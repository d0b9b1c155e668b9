"""Converting an ``EndpointPickerConfig`` between the two apiVersions without changing its meaning.

``convert_document(raw, resolved, to)`` takes a document (as YAML gives it) and its resolved form and
returns the document for apiVersion ``to``; everything not listed here is copied unchanged (key
order kept). The only semantic difference between the apiVersions is how data consumers without a
producer are wired (:mod:`scheduler.producers`), so:

* to ``llm-d.ai/v1alpha1``: a consumer that works self-contained under the legacy apiVersion (a
  ``prefix-cache-scorer`` with no producer: it owns its index) gets its resolved parameters written
  out, which keeps it self-contained (instead of being fed by an injected
  ``approx-prefix-cache-producer`` with llm-d-router's defaults: 64-token block floor, 128K-token cap);
* to ``inference.networking.x-k8s.io/v1alpha1``: producers the new apiVersion injected are declared
  explicitly, so the consumers keep reading them.

The caller checks the result: loading it must resolve to the same configuration (``check-config
--to`` does, see :func:`equivalent`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from scheduler.config.document import API_VERSION, API_VERSIONS, LEGACY_API_VERSION
from scheduler.config.resolved import ResolvedConfig
from scheduler.errors import ConfigError
from scheduler.producers import DataProducer, SelfContainedConsumer

__all__ = ["convert_document", "equivalent"]


def convert_document(raw: Mapping[str, Any], resolved: ResolvedConfig, to: str) -> dict[str, Any]:
    """The document for apiVersion ``to`` (a new mapping; ``raw`` is not changed)."""
    if to not in API_VERSIONS:
        raise ConfigError(f"expected one of {', '.join(API_VERSIONS)}, got {to!r}", location="--to")
    out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in raw.items()}
    out["apiVersion"] = to
    plugins: list[Any] = list(out.get("plugins") or [])
    if to == API_VERSION and resolved.api_version == LEGACY_API_VERSION:
        for entry in resolved.plugins:
            plugin = entry.plugin
            if entry.implicit or not isinstance(plugin, SelfContainedConsumer):
                continue
            parameters = plugin.standalone_parameters()
            if parameters is None:
                continue
            index = int(entry.spec.location.removeprefix("plugins[").removesuffix("]"))
            item = dict(plugins[index])
            item["parameters"] = {k: v for k, v in parameters.items() if v is not None}
            plugins[index] = item
    if to == LEGACY_API_VERSION and resolved.api_version == API_VERSION:
        plugins.extend(
            {"type": entry.plugin.plugin_type, "name": entry.plugin.name}
            for entry in resolved.plugins
            if entry.implicit and isinstance(entry.plugin, DataProducer)
        )
    if plugins:
        out["plugins"] = plugins
    return _ordered(out)


def _ordered(doc: dict[str, Any]) -> dict[str, Any]:
    head = {k: doc[k] for k in ("apiVersion", "kind") if k in doc}
    return head | {k: v for k, v in doc.items() if k not in head}


def equivalent(a: ResolvedConfig, b: ResolvedConfig) -> str | None:
    """None when both resolve to the same plugins (types, names, parameters), profiles, handler and
    saturation detector; else the first difference, described. Implicit plugins count as plugins, so
    a producer declared on one side and injected on the other is the same plugin."""
    left, right = _comparable(a), _comparable(b)
    for key in ("plugins", "schedulingProfiles", "saturationDetector"):
        if left.get(key) != right.get(key):
            return f"{key} differ: {left.get(key)!r} != {right.get(key)!r}"
    return None


def _comparable(resolved: ResolvedConfig) -> dict[str, Any]:
    doc = resolved.to_dict()
    doc["plugins"] = sorted(doc["plugins"], key=lambda p: p["name"])
    return doc
