"""``epp check-config`` prints a configuration that loads back to the same resolved form.

For every registered plugin type (built with no parameters, or the fewest it needs) and for every
example below (which together set every parameter whose value is converted or normalised when parsed),
``check-config`` of the rendered output prints that output again. A type or parameter added without
an example here fails :func:`test_every_converted_parameter_has_an_example`.
"""

from __future__ import annotations

import dataclasses
import io
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from testutil import write_tokenizer

from epp.config.sections import check_config, picker_registry
from scheduler.params import _fields

API = "llm-d.ai/v1alpha1"
LEGACY_API = "inference.networking.x-k8s.io/v1alpha1"

# The fewest parameters of the types upstream also refuses to build without any.
MINIMAL: dict[str, dict[str, Any]] = {
    "priority-holdback-policy": {"minCeiling": 0.4},
    "by-label": {"label": "llm-d.ai/role"},
    "endpoint-attribute-filter": {
        "attribute": "gpu",
        "algorithm": {"type": "threshold", "threshold": {"operator": "LessThan", "value": 1}},
    },
    "endpoint-attribute-scorer": {"attributeKey": "gpu", "algorithm": {"type": "linear_lower_is_better"}},
    "header-label-affinity-scorer": {"headerName": "x-zone", "labelKey": "zone"},
    "utilization-filter": {"conditions": [{"metric": "kv-cache-utilization", "maxValue": 0.9}]},
    "request-attribute-reporter": {
        "attributes": [
            {
                "key": {"name": "tokens"},
                "expression": "usage.prompt_tokens + usage.completion_tokens",
                "condition": "usage.completion_tokens > 0.0",
            }
        ]
    },
    "session-id-producer": {"headerName": "x-session-id"},
    "file-discovery": {"path": "/etc/epp/endpoints.yaml"},
    "multicluster-file-discovery": {"path": "/etc/epp/clusters.yaml"},
}

# Plugins a type needs next to it (a plugin it references by default).
COMPANIONS: dict[str, list[dict[str, Any]]] = {
    "pd-profile-handler": [{"type": "prefix-based-pd-decider"}, {"type": "approx-prefix-cache-producer"}],
    "disagg-profile-handler": [{"type": "prefix-based-pd-decider"}],
}

# a tokenizer.json for precise-prefix-cache-*'s in-process tokenizer (tokenizersPoolConfig.local)
TOKENIZER = write_tokenizer(
    Path(tempfile.mkdtemp(prefix="epp-roundtrip-")) / "model", ["alpha beta gamma delta"], vocab_size=40
)
LOCAL_POOL = {
    "modelName": "m",
    "workersCount": 2,
    "minPrefixOverlapRatio": 0.5,
    "local": {"modelTokenizerMap": {"m": str(TOKENIZER)}},
    "hf": {"enabled": False},
}

# (type, parameters): every parameter that is converted or normalised when parsed, set to a value
# other than its default.
EXAMPLES: list[tuple[str, dict[str, Any]]] = [
    ("session-affinity-scorer", {"encodedEndpointHeaderConfig": {"header": "X-Foo"}}),
    ("agent-identity", {"additionalSessionHeaders": ["x-agent-session", "x-team-session"]}),
    ("session-affinity-scorer", {"headerName": "X-Old-Session"}),
    (
        "session-affinity-scorer",
        {
            "strategy": "session_id",
            "sessionIdConfig": {
                "sources": [{"header": "X-Sess"}, {"header": "x-alt"}],
                "evictionTtlSeconds": 60,
                "evictionSweepSeconds": 5,
            },
            "profileName": "decode",
        },
    ),
    ("session-affinity-filter", {"encodedEndpointHeaderConfig": {"header": "X-Foo"}}),
    ("session-affinity-filter", {"headerName": "X-Old-Session"}),
    (
        "session-affinity-filter",
        {"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "s"}]}},
    ),
    ("multicluster-session-affinity-filter", {"encodedEndpointHeaderConfig": {"header": "X-Foo"}}),
    ("multicluster-session-affinity-filter", {"headerName": "X-Old-Session"}),
    (
        "multicluster-session-affinity-filter",
        {
            "strategy": "session_id",
            "sessionIdConfig": {"sources": [{"header": "s"}], "evictionTtlSeconds": 9},
        },
    ),
    ("active-request-scorer", {"requestTimeout": "2m30s"}),
    ("token-load-scorer", {"requestTimeout": "1m"}),
    ("prefix-cache-affinity-filter", {"requestTimeout": "45s"}),
    ("prefix-affinity-scorer", {"requestTimeout": "45s"}),
    ("prefix-affinity-scorer", {"newPrefixPlacement": "hash"}),
    ("prefix-affinity-scorer", {"newPrefixPlacement": "load", "placementWindow": "90s"}),
    ("prefix-affinity-scorer", {"spillPlacement": "load"}),
    ("prefix-affinity-scorer", {"spillShare": 0.5, "maxBurstImbalance": 12}),
    ("prefix-affinity-scorer", {"slowSpeedRatio": 0.5, "speedSamples": 64, "shareHalfLife": "10s"}),
    ("ready-filter", {"metricsStalenessThreshold": "500ms"}),
    ("utilization-detector", {"metricsStalenessThreshold": "1s"}),
    ("concurrency-detector", {"requestTimeout": "90s"}),
    ("context-length-aware", {"label": "example.com/ctx"}),
    ("by-label", {"label": "example.com/Role", "validValues": ["a"]}),
    ("header-label-affinity-scorer", {"headerName": "X-Zone", "labelKey": "Zone"}),
    (
        "endpoint-attribute-scorer",
        {
            "attributeKey": "gpu",
            "algorithm": {
                "type": "linear_higher_is_better",
                "normalization": {"fixedRange": {"min": 1, "max": 5}},
            },
        },
    ),
    (
        "endpoint-attribute-filter",
        {
            "attribute": "gpu",
            "algorithm": {"type": "threshold", "threshold": {"operator": "GreaterThanOrEqual", "value": 2}},
        },
    ),
    (
        "utilization-filter",
        {
            "conditions": [
                {"metric": "kv-cache-utilization", "maxValue": 0.8},
                {"metric": "waiting-queue", "maxValue": 10},
            ]
        },
    ),
    (
        "label-selector-filter",
        {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "In", "values": ["d"]}]},
    ),
    (
        "by-label-selector",
        {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "Exists"}]},
    ),
    (
        "pd-profile-handler",
        {"primaryPort": 8200, "prefixMatchInfoProducerName": "approx-prefix-cache-producer"},
    ),
    ("disagg-profile-handler", {"stageOrder": "Prefill_First", "profiles": {"decode": "d", "prefill": "p"}}),
    ("disagg-profile-handler", {"decodeProfile": "d", "prefillProfile": "p", "primaryPort": 8000}),
    (
        "disagg-profile-handler",
        {"deciders": {"prefill": "prefix-based-pd-decider"}, "profiles": {"encode": "e"}},
    ),
    ("predicted-latency-producer", {"contextTTL": "90s", "sloBufferFactor": 1.2}),
    ("predicted-latency-producer", {"coldStartPrior": False, "coldStartPrefillThroughput": 8000}),
    ("program-aware-fairness", {"strategy": "las", "lasWeightService": 0.7, "lasWeightHeadWait": 0.3}),
    ("fair-share-fairness-policy", {"reserve": 0.25, "activeWindowSeconds": 0.5}),
    (
        "precise-prefix-cache-scorer",
        {
            "indexerConfig": {
                "tokenizersPoolConfig": LOCAL_POOL,
                "prefixStoreConfig": {"blockSize": 64, "cacheSize": 100},
            }
        },
    ),
    (
        "precise-prefix-cache-producer",
        {
            "indexerConfig": {
                "tokenizersPoolConfig": {
                    **LOCAL_POOL,
                    "local": {
                        "autoDiscoveryDir": str(TOKENIZER.parent.parent),
                        "autoDiscoveryTokenizerFileName": "tokenizer.json",
                    },
                    "modelName": TOKENIZER.parent.name,
                }
            }
        },
    ),
]


def _check(tmp_path: Path, document: dict[str, Any], name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    out, err = io.StringIO(), io.StringIO()
    code = check_config([str(path)], stdout=out, stderr=err)
    assert code == 0, f"{name}: {err.getvalue()}"
    return out.getvalue()


def _document(plugin_type: str, parameters: dict[str, Any] | None, api: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": plugin_type}
    if parameters:
        entry["parameters"] = parameters
    plugins = [entry, *COMPANIONS.get(plugin_type, [])]
    return {"apiVersion": api, "kind": "EndpointPickerConfig", "plugins": plugins}


def assert_round_trip(tmp_path: Path, document: dict[str, Any]) -> None:
    first = _check(tmp_path, document, "input")
    again = _check(tmp_path, yaml.safe_load(first), "rendered")
    assert again == first, f"the rendered configuration reloads differently:\n{first}\n---\n{again}"


@pytest.mark.parametrize("api", [API, LEGACY_API])
@pytest.mark.parametrize("plugin_type", sorted(picker_registry().types()))
def test_every_type_round_trips_with_default_parameters(tmp_path: Path, plugin_type: str, api: str) -> None:
    assert_round_trip(tmp_path, _document(plugin_type, MINIMAL.get(plugin_type), api))


@pytest.mark.parametrize(
    ("plugin_type", "parameters"), EXAMPLES, ids=[f"{t}-{i}" for i, (t, _) in enumerate(EXAMPLES)]
)
def test_set_parameters_round_trip(tmp_path: Path, plugin_type: str, parameters: dict[str, Any]) -> None:
    assert_round_trip(tmp_path, _document(plugin_type, {**MINIMAL.get(plugin_type, {}), **parameters}, API))


def _converted_keys(plugin_type: str) -> set[str]:
    """Parameters of the type whose parsed value is not the YAML value as given (a ``convert``
    function, or a field typed ``Any`` that the plugin normalises)."""
    from epp.config.sections import _load_raw

    loaded = _load_raw(_document(plugin_type, MINIMAL.get(plugin_type), API), "(test)")
    plugin = loaded.config.plugin(plugin_type)
    params = getattr(plugin, "params", None)
    if params is None or not dataclasses.is_dataclass(params) or isinstance(params, type):
        return set()  # rendered from the parameters as given
    return {f.key for f in _fields(type(params)) if f.spec.convert is not None or f.kind is Any}


def test_every_converted_parameter_has_an_example() -> None:
    covered: dict[str, set[str]] = {}
    for plugin_type, parameters in EXAMPLES:
        covered.setdefault(plugin_type, set()).update(parameters)
    missing = {
        (t, key)
        for t in picker_registry().types()
        for key in _converted_keys(t)
        if key not in covered.get(t, set())
    }
    assert not missing, f"add an example setting these parameters to EXAMPLES: {sorted(missing)}"
