"""The flowControl section: schema, defaults, policy references, check-config output."""

from __future__ import annotations

import io
import sys

import pytest
import yaml

from epp.config.sections import check_config, load_picker_config
from epp.flowcontrol.config import parse_quantity
from scheduler.errors import ConfigError

HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n"
PLUGINS = "plugins:\n- type: max-score-picker\n- type: round-robin-fairness-policy\n- type: queue-scorer\n"


def load(section: str, head: str = HEAD, plugins: str = PLUGINS):  # type: ignore[no-untyped-def]
    return load_picker_config(None, head + plugins + section, source="fc.yaml")


def test_defaults_llm_d_router() -> None:
    flow = load("").flow_control
    assert flow is not None
    assert (flow.max_requests, flow.max_bytes, flow.default_ttl, flow.no_endpoint_ttl) == (0, 0, 60.0, 60.0)
    band = flow.band(7)
    assert (band.max_requests, band.max_bytes) == (5000, 1_000_000_000)
    assert band.fairness.plugin_type == "global-strict-fairness-policy"
    assert band.ordering.plugin_type == "fcfs-ordering-policy"
    assert flow.usage_limit.plugin_type == "static-usage-limit-policy"


def test_gie_api_version_defaults_to_no_ttl() -> None:
    head = HEAD.replace("llm-d.ai/v1alpha1", "inference.networking.x-k8s.io/v1alpha1")
    flow = load("", head).flow_control
    assert flow is not None and flow.default_ttl == 0.0


def test_full_section() -> None:
    loaded = load(
        "flowControl:\n"
        "  saturationDetector: {pluginRef: concurrency-detector}\n"
        "  maxBytes: 10Gi\n  maxRequests: 1k\n  defaultRequestTTL: 1m\n  noEndpointRequestTTL: 5m\n"
        "  defaultNegativePriorityBand: {maxRequests: '3'}\n"
        "  priorityBands:\n"
        "  - {priority: 100, maxRequests: '500', fairnessPolicyRef: round-robin-fairness-policy,\n"
        "     orderingPolicyRef: fcfs-ordering-policy}\n",
        plugins=PLUGINS + "- type: concurrency-detector\n",
    )
    flow = loaded.flow_control
    assert flow is not None
    assert (flow.max_bytes, flow.max_requests, flow.default_ttl, flow.no_endpoint_ttl) == (
        10 * 2**30,
        1000,
        60,
        300,
    )
    assert (
        flow.band(100).max_requests == 500
        and flow.band(100).fairness.plugin_type == "round-robin-fairness-policy"
    )
    assert flow.band(-4).max_requests == 3 and flow.band(4).max_requests == 5000
    assert (
        loaded.saturation_detector is not None
        and loaded.saturation_detector.plugin_type == "concurrency-detector"
    )


@pytest.mark.parametrize(
    ("section", "location", "message"),
    [
        ("{maxQueue: 3}", "maxQueue", "unknown field"),
        ("{priorityBands: [{priority: 1, weight: 2}]}", "priorityBands[0].weight",
         "unknown field"),
        ("{priorityBands: [{maxRequests: 2}]}", "priorityBands[0].priority", "required"),
        ("{priorityBands: [{priority: 1}, {priority: 1}]}", "priorityBands[1].priority",
         "duplicate priority level 1"),
        ("{maxBytes: -1}", "maxBytes", "non-negative"),
        ("{maxRequests: lots}", "maxRequests", "Kubernetes quantity"),
        ("{defaultRequestTTL: 60}", "defaultRequestTTL", "duration"),
        ("{defaultRequestTTL: -1s}", "defaultRequestTTL", "duration"),
        ("{enableEviction: true}", "enableEviction", "not implemented"),
        ("{priorityBands: [{priority: 1, orderingPolicyRef: nope}]}",
         "priorityBands[0].orderingPolicyRef", 'no plugin named "nope"'),
        ("{priorityBands: [{priority: 1, orderingPolicyRef: queue-scorer}]}",
         "priorityBands[0].orderingPolicyRef", "is not an ordering policy"),
        ("{defaultPriorityBand: {fairnessPolicyRef: fcfs-ordering-policy}}",
         "defaultPriorityBand.fairnessPolicyRef", "is not a fairness policy"),
        ("{usageLimitPolicyPluginRef: max-score-picker}", "usageLimitPolicyPluginRef",
         "is not a usage limit policy"),
        ("{saturationDetector: {pluginRef: queue-scorer}}",
         "saturationDetector.pluginRef", "is not a saturation detector"),
        ("{saturationDetector: {name: x}}", "saturationDetector.name", "unknown field"),
    ],
)  # fmt: skip
def test_bad_sections_name_the_field(section: str, location: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(f"flowControl: {section}\n")
    assert exc.value.location == f"flowControl.{location}" and message in exc.value.message
    assert exc.value.source == "fc.yaml"


def test_section_without_gate_is_validated_but_flow_control_stays_off() -> None:
    loaded = load("flowControl: {maxRequests: '5'}\n", head=HEAD.replace("featureGates: [flowControl]\n", ""))
    assert loaded.flow_control is not None and not loaded.feature_gates.enabled("flowControl")
    with pytest.raises(ConfigError):
        load("flowControl: {maxRequests: x}\n", head=HEAD.replace("featureGates: [flowControl]\n", ""))


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (100, 100),
        ("1k", 1000),
        ("10Gi", 10 * 2**30),
        ("500M", 500_000_000),
        ("1.5", 2),
        ("1e3", 1000),
        ("0", 0),
    ],
)
def test_quantities(raw: object, value: int) -> None:
    assert parse_quantity(raw, "x") == value


def test_check_config_prints_the_effective_section_and_it_loads_the_same() -> None:
    text = HEAD + PLUGINS + "flowControl: {maxRequests: '7', priorityBands: [{priority: 3}]}\n"
    out, err = io.StringIO(), io.StringIO()
    stdin = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        assert check_config(["-"], stdout=out, stderr=err) == 0, err.getvalue()
    finally:
        sys.stdin = stdin
    rendered = yaml.safe_load(out.getvalue())
    section = rendered["flowControl"]
    assert section["maxRequests"] == "7" and section["defaultRequestTTL"] == "60s"
    assert section["defaultPriorityBand"] == {
        "maxBytes": "1000000000",
        "maxRequests": "5000",
        "fairnessPolicyRef": "global-strict-fairness-policy",
        "orderingPolicyRef": "fcfs-ordering-policy",
    }
    assert section["priorityBands"][0]["priority"] == 3
    again = load_picker_config(None, out.getvalue()).flow_control
    assert again is not None and again.as_yaml() == section
