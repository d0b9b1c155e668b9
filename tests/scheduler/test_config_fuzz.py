"""Arbitrary documents never crash the loader: they load or fail with a ConfigError."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.config import resolve_document
from scheduler.errors import ConfigError
from scheduler.registry import default_registry

REGISTRY = default_registry(entry_points=False)
TYPES = ["queue-scorer", "max-score-picker", "prefix-cache-scorer", "random-picker", "ready-filter"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**9), st.floats(allow_nan=True), st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
plugin_entries = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES) | values},
    optional={
        "name": st.sampled_from(["a", "b", "queue-scorer"]) | values,
        "parameters": st.dictionaries(
            st.sampled_from(["maxNumOfEndpoints", "blockSizeTokens", "autoTune", "x"]), values, max_size=2
        )
        | values,
    },
)
ref_entries = st.fixed_dictionaries(
    {"pluginRef": st.sampled_from(["a", "b", *TYPES]) | values}, optional={"weight": values}
)
profiles = st.fixed_dictionaries(
    {"name": st.sampled_from(["p", "q"]) | values},
    optional={"plugins": st.lists(ref_entries, max_size=4) | values, "shadow": values},
)
documents = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["inference.networking.x-k8s.io/v1alpha1", "llm-d.ai/v1alpha1"]),
        "kind": st.just("EndpointPickerConfig"),
    },
    optional={
        "plugins": st.lists(plugin_entries, max_size=5) | values,
        "schedulingProfiles": st.lists(profiles, max_size=3) | values,
        "saturationDetector": st.dictionaries(
            st.sampled_from(["pluginRef", "queueDepthThreshold", "kvCacheUtilThreshold"]), values, max_size=2
        )
        | values,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents | values)
def test_loader_never_crashes(doc: Any) -> None:
    try:
        resolved = resolve_document(doc, "<fuzz>", registry=REGISTRY)
    except ConfigError as exc:
        assert exc.source == "<fuzz>" and exc.message
        return
    rendered = resolved.render()  # a valid document renders to YAML that loads again
    assert resolve_document(yaml.safe_load(rendered), "<again>", registry=REGISTRY).render() == rendered
