from typing import Any

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.label_selector import LabelSelectorFilter, factory
from scheduler.types import Endpoint, LLMRequest

REQ = LLMRequest(request_id="r", model="m", target_model="m")
A = Endpoint("10.0.0.1:8000", labels={"gpu": "h100", "role": "decode", "zone": "a"})
B = Endpoint("10.0.0.2:8000", labels={"gpu": "a100", "role": "prefill"})
C = Endpoint("10.0.0.3:8000", labels={"gpu": "h100", "canary": ""})
D = Endpoint("10.0.0.4:8000")
ALL = [A, B, C, D]


def run(parameters: dict[str, Any] | None) -> list[Endpoint]:
    f = factory("f", parameters, PluginHandle())
    assert isinstance(f, LabelSelectorFilter)
    return list(f.filter(CycleState(), REQ, ALL))  # type: ignore[arg-type]


def expr(key: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        out["values"] = values
    return out


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        (None, ALL),
        ({}, ALL),
        ({"matchLabels": {}, "matchExpressions": []}, ALL),
        ({"matchLabels": {"gpu": "h100"}}, [A, C]),
        ({"matchLabels": {"gpu": "h100", "zone": "a"}}, [A]),
        ({"matchLabels": {"canary": ""}}, [C]),
        ({"matchExpressions": [expr("gpu", "In", ["a100", "h100"])]}, [A, B, C]),
        ({"matchExpressions": [expr("gpu", "NotIn", ["h100"])]}, [B, D]),  # absent key matches NotIn
        ({"matchExpressions": [expr("role", "Exists")]}, [A, B]),
        ({"matchExpressions": [expr("role", "Exists", [])]}, [A, B]),
        ({"matchExpressions": [expr("role", "DoesNotExist")]}, [C, D]),
        ({"matchExpressions": [expr("canary", "DoesNotExist"), expr("gpu", "In", ["h100"])]}, [A]),
        ({"matchLabels": {"gpu": "h100"}, "matchExpressions": [expr("zone", "NotIn", ["a"])]}, [C]),
        ({"matchLabels": {"gpu": "tpu"}}, []),
    ],
)
def test_matches(parameters: dict[str, Any] | None, expected: list[Endpoint]) -> None:
    assert run(parameters) == expected


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"matchExpressions": [expr("gpu", "In")]}, "must be specified when `operator` is 'In' or 'NotIn'"),
        ({"matchExpressions": [expr("gpu", "NotIn", [])]}, "must be specified"),
        (
            {"matchExpressions": [expr("gpu", "Exists", ["x"])]},
            "may not be specified when `operator` is 'Exists'",
        ),
        ({"matchExpressions": [expr("gpu", "DoesNotExist", ["x"])]}, "may not be specified"),
        ({"matchExpressions": [expr("gpu", "in", ["x"])]}, "'in' is not a valid label selector operator"),
        ({"matchExpressions": [expr("gpu", "Gt", ["1"])]}, "not a valid label selector operator"),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists", "value": []}]}, "unknown field 'value'"),
        ({"matchExpressions": [expr("-bad", "Exists")]}, "name part must be"),
        ({"matchExpressions": [expr("Bad.Prefix/name", "Exists")]}, "prefix part must be"),
        ({"matchExpressions": [expr("/name", "Exists")]}, "prefix part must be non-empty"),
        ({"matchExpressions": [expr("x" * 64, "Exists")]}, "name part must be"),
        ({"matchExpressions": [expr("gpu", "In", ["bad value"])]}, r"matchExpressions\[0\]\.values\[0\]"),
        ({"matchExpressions": [expr("gpu", "In", [1])]}, "value must be a string"),
        ({"matchExpressions": {"key": "gpu"}}, "matchExpressions: expected a list"),
        ({"matchLabels": {"gpu": "v" * 64}}, "63 characters or less"),
        ({"matchLabels": {"gpu": 3}}, "value must be a string"),
        ({"matchLabels": ["gpu"]}, "matchLabels: expected a mapping"),
        ({"selector": {}}, "unknown parameter"),
    ],
)
def test_validation(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        factory("f", parameters, PluginHandle())
    assert 'label-selector-filter "f"' in str(info.value)


def test_valid_prefixed_keys() -> None:
    f = factory("f", {"matchExpressions": [expr("llm-d.ai/role", "In", ["decode", "both"])]}, PluginHandle())
    assert isinstance(f, LabelSelectorFilter)
    assert str(f.selector) == "llm-d.ai/role in (both,decode)"


def test_reason_names_unmet_requirement() -> None:
    f = factory(
        "f", {"matchLabels": {"gpu": "h100"}, "matchExpressions": [expr("role", "Exists")]}, PluginHandle()
    )
    assert isinstance(f, LabelSelectorFilter)
    assert f.reason(CycleState(), REQ, B) == "labels do not match selector requirement gpu in (h100)"
    assert f.reason(CycleState(), REQ, C) == "labels do not match selector requirement role"
