"""endpoint-attribute-scorer and endpoint-attribute-filter (llm-d's test tables)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.attributes import scalar_attribute_key
from scheduler.plugins.filters import endpoint_attribute as attr_filter
from scheduler.plugins.scorers import endpoint_attribute as attr_scorer
from scheduler.types import Endpoint, LLMRequest

REQ = LLMRequest(request_id="r", model="m", target_model="m")
KEY = scalar_attribute_key("custom.value", "core-metrics-extractor")


def ep(value: Any = None, key: str = KEY) -> Endpoint:
    return Endpoint(f"10.0.0.{id(value) % 250}:8000", attributes={key: value} if value is not None else {})


LOWER = {"type": "linear_lower_is_better"}
HIGHER = {"type": "linear_higher_is_better"}


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"attributeKey": "custom.queue_depth", "algorithm": LOWER}, None),
        ({"attributeKey": "GPUUtilization", "producer": "dcgm-extractor", "algorithm": LOWER}, None),
        (
            {"attributeKey": "GPUUtilization/dcgm-extractor", "algorithm": LOWER},
            'split it into attribute: "GPUUtilization" and producer: "dcgm-extractor"',
        ),
        ({"attributeKey": "llm-d.ai/multicluster-queue-size", "producer": "", "algorithm": LOWER}, None),
        ({"attributeKey": "t", "algorithm": {**HIGHER, "normalization": {"adaptiveRange": {}}}}, None),
        (
            {
                "attributeKey": "k",
                "algorithm": {**LOWER, "normalization": {"fixedRange": {"min": 0, "max": 1}}},
            },
            None,
        ),
        ({"algorithm": LOWER}, "attributeKey"),
        ({"attributeKey": "k", "algorithm": {}}, "algorithm"),
        ({"attributeKey": "k", "algorithm": {"type": "quadratic"}}, "algorithm.type"),
        (
            {
                "attributeKey": "k",
                "algorithm": {
                    **LOWER,
                    "normalization": {"fixedRange": {"min": 0, "max": 1}, "adaptiveRange": {}},
                },
            },
            "at most one normalization strategy",
        ),
        (
            {
                "attributeKey": "k",
                "algorithm": {**LOWER, "normalization": {"fixedRange": {"min": 1, "max": 1}}},
            },
            "min < max",
        ),
    ],
)
def test_scorer_factory(params: dict[str, Any], error: str | None) -> None:
    if error is None:
        attr_scorer.factory("s", params, PluginHandle())
    else:
        with pytest.raises(ConfigError, match="endpoint-attribute-scorer") as info:
            attr_scorer.factory("s", params, PluginHandle())
        assert error in str(info.value)


def score(algorithm: dict[str, Any], values: list[Any]) -> list[float]:
    plugin = attr_scorer.factory(
        "s", {"attributeKey": "custom.value", "algorithm": algorithm}, PluginHandle()
    )
    return plugin.score(CycleState(), REQ, [ep(v) for v in values])  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize(
    ("algorithm", "values", "want"),
    [
        (LOWER, [10, 5, 0], [0.0, 0.5, 1.0]),
        (HIGHER, [10, 5, 0], [1.0, 0.5, 0.0]),
        (LOWER, [7, 7], [1.0, 1.0]),  # equal values: neutral
        (HIGHER, [10, None, 0], [1.0, 0.0, 0.0]),  # missing scores zero
        (HIGHER, [None, None], [0.0, 0.0]),
        (HIGHER, [True, "x", 4], [0.0, 0.0, 1.0]),  # not a number: missing
    ],
)
def test_adaptive_range(algorithm: dict[str, Any], values: list[Any], want: list[float]) -> None:
    assert score(algorithm, values) == pytest.approx(want)


@pytest.mark.parametrize(
    ("algorithm", "values", "want"),
    [
        (LOWER, [10, 5, 0], [0.0, 0.5, 1.0]),
        (HIGHER, [10, 5, 0], [1.0, 0.5, 0.0]),
        (LOWER, [7, 7], [0.3, 0.3]),  # by range position, not neutral
        (LOWER, [15, -5], [0.0, 1.0]),  # clamped
        (HIGHER, [None, 5], [0.0, 0.5]),
    ],
)
def test_fixed_range(algorithm: dict[str, Any], values: list[Any], want: list[float]) -> None:
    fixed = {**algorithm, "normalization": {"fixedRange": {"min": 0, "max": 10}}}
    assert score(fixed, values) == pytest.approx(want)


def test_scorer_reads_the_producer_key_and_logs_at_start(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="scheduler.plugins"):
        plugin = attr_scorer.factory(
            "gpu",
            {"attributeKey": "GPUUtilization", "producer": "dcgm-extractor", "algorithm": LOWER},
            PluginHandle(),
        )
    assert 'reads endpoint attribute "dcgm-extractor:GPUUtilization"' in caplog.text
    a = Endpoint("a", attributes={"dcgm-extractor:GPUUtilization": 90.0})
    b = Endpoint("b", attributes={"dcgm-extractor:GPUUtilization": 10.0, "GPUUtilization": 0.0})
    assert plugin.score(CycleState(), REQ, [a, b]) == [0.0, 1.0]  # type: ignore[attr-defined]


# -- filter ---------------------------------------------------------------------------------------


def threshold(op: str, value: float) -> dict[str, Any]:
    return {"type": "threshold", "threshold": {"operator": op, "value": value}}


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"attribute": "k", "algorithm": threshold("LessThan", 1)}, None),
        (
            {
                "attribute": "k",
                "onMissing": "Fail",
                "fallbackOnEmpty": True,
                "algorithm": threshold("Equal", 1),
            },
            None,
        ),
        ({"algorithm": threshold("LessThan", 1)}, "attribute"),
        ({"attribute": "GPU", "producer": "dcgm-extractor", "algorithm": threshold("LessThan", 1)}, None),
        ({"attribute": "GPU/dcgm-extractor", "algorithm": threshold("LessThan", 1)}, "split it into"),
        ({"attribute": "a/b", "producer": "", "algorithm": threshold("LessThan", 1)}, None),
        ({"attribute": "k", "onMissing": "Maybe", "algorithm": threshold("LessThan", 1)}, "onMissing"),
        ({"attribute": "k", "algorithm": {}}, "algorithm"),
        ({"attribute": "k", "algorithm": {"type": "range"}}, "algorithm"),
        ({"attribute": "k", "algorithm": {"type": "threshold"}}, "algorithm"),
        ({"attribute": "k", "algorithm": threshold("Below", 1)}, "algorithm"),
    ],
)
def test_filter_factory(params: dict[str, Any], error: str | None) -> None:
    if error is None:
        attr_filter.factory("f", params, PluginHandle())
    else:
        with pytest.raises(ConfigError, match="endpoint-attribute-filter") as info:
            attr_filter.factory("f", params, PluginHandle())
        assert error in str(info.value)


@pytest.mark.parametrize(
    ("op", "value", "extra", "values", "want"),
    [
        ("LessThan", 5, {}, [3, 5, 7], [3]),
        ("LessThanOrEqual", 5, {}, [3, 5, 7], [3, 5]),
        ("GreaterThan", 5, {}, [3, 5, 7], [7]),
        ("GreaterThanOrEqual", 5, {}, [3, 5, 7], [5, 7]),
        ("Equal", 5, {}, [3, 5, 7], [5]),
        ("NotEqual", 5, {}, [3, 5, 7], [3, 7]),
        ("LessThan", 5, {}, [None, 7], [None]),  # missing passes by default
        ("LessThan", 5, {"onMissing": "Fail"}, [None, 3], [3]),
        ("LessThan", 1, {}, [3, 5], []),
        ("LessThan", 1, {"fallbackOnEmpty": True}, [3, 5], [3, 5]),
        ("LessThan", 4, {"fallbackOnEmpty": True}, [3, 5], [3]),
    ],
)
def test_filter(op: str, value: float, extra: dict[str, Any], values: list[Any], want: list[Any]) -> None:
    plugin = attr_filter.factory(
        "f", {"attribute": "custom.value", "algorithm": threshold(op, value), **extra}, PluginHandle()
    )
    pool = [ep(v) for v in values]
    kept = plugin.filter(CycleState(), REQ, pool)  # type: ignore[attr-defined]
    assert [e.attributes.get(KEY) for e in kept] == want
