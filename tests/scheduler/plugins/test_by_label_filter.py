from typing import Any

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.by_label import ByLabelFilter, ByLabelParams, factory
from scheduler.plugins.filters.label_selector import ByLabelSelectorFilter, by_label_selector_factory
from scheduler.types import Endpoint, LLMRequest

REQ = LLMRequest(request_id="r", model="m", target_model="m")
KEY = "llm-d.ai/role"
A = Endpoint("10.0.0.1:8000", labels={KEY: "decode"})
B = Endpoint("10.0.0.2:8000", labels={KEY: "prefill"})
C = Endpoint("10.0.0.3:8000", labels={KEY: ""})
D = Endpoint("10.0.0.4:8000")
ALL = [A, B, C, D]


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"label": KEY, "validValues": ["decode"]}, [A]),
        ({"label": KEY, "validValues": ["decode", "prefill"]}, [A, B]),
        ({"label": KEY, "validValues": ["decode"], "allowsNoLabel": True}, [A, D]),
        ({"label": KEY, "validValues": [""]}, [C]),
        ({"label": KEY}, []),
        ({"label": "other", "allowsNoLabel": True}, ALL),
    ],
)
def test_filter(parameters: dict[str, Any], expected: list[Endpoint]) -> None:
    f = factory("f", parameters, PluginHandle())
    assert isinstance(f, ByLabelFilter)
    assert list(f.filter(CycleState(), REQ, ALL)) == expected


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({}, r"parameters\.label: required parameter missing"),
        ({"label": "-bad"}, r"parameters\.label: expected a label key"),
        ({"label": KEY, "validValues": "decode"}, r"parameters\.validValues"),
        ({"label": KEY, "allowsNoLabel": "yes"}, r"parameters\.allowsNoLabel"),
    ],
)
def test_validation(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        factory("f", parameters, PluginHandle())


def test_reason() -> None:
    f = ByLabelFilter("f", ByLabelParams(KEY, ("decode",)))
    assert f.reason(CycleState(), REQ, B) == f"{KEY}=prefill is not one of decode"
    assert f.reason(CycleState(), REQ, D) == f"no {KEY} label"


def test_by_label_selector_is_the_label_selector_filter() -> None:
    f = by_label_selector_factory("s", {"matchLabels": {KEY: "decode"}}, PluginHandle())
    assert isinstance(f, ByLabelSelectorFilter) and f.plugin_type == "by-label-selector"
    assert list(f.filter(CycleState(), REQ, ALL)) == [A]
    with pytest.raises(ConfigError, match='by-label-selector "s"'):
        by_label_selector_factory("s", {"matchExpressions": [{"key": KEY, "operator": "In"}]}, PluginHandle())
