"""Parameter parsing: conversions, bounds, unknown keys, messages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from scheduler.errors import ConfigError
from scheduler.params import REQUIRED, param, params_to_dict, parse_params


@dataclass(frozen=True, slots=True)
class Params:
    max_num_of_endpoints: int = param(1, ge=1)
    threshold: float = param(0.8, ge=0.0, le=1.0)
    auto_tune: bool = param(True)
    mode: str = param("kv", choices=("kv", "queue"))
    names: tuple[str, ...] = param(())
    labels: Mapping[str, str] = param({})
    limit: int | None = param(None, gt=0)
    header: str = param("x-session-token", key="headerName")


@dataclass(frozen=True, slots=True)
class Required:
    target: str = param(REQUIRED)


def parse(raw: Any) -> Params:
    return parse_params(Params, raw, "max-score-picker", "p")


def test_defaults_and_camel_case_keys() -> None:
    p = parse(None)
    assert p == Params()
    p = parse({"maxNumOfEndpoints": 3, "threshold": 1, "autoTune": False, "headerName": "h"})
    assert (p.max_num_of_endpoints, p.threshold, p.auto_tune, p.header) == (3, 1.0, False, "h")
    assert isinstance(p.threshold, float)


def test_collections_and_optional() -> None:
    p = parse({"names": ["a", "b"], "labels": {"k": "v"}, "limit": None})
    assert p.names == ("a", "b") and dict(p.labels) == {"k": "v"} and p.limit is None
    assert parse({"limit": 4}).limit == 4


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"maxNumOfEndpoints": "two"},
            '(max-score-picker "p"): parameters.maxNumOfEndpoints: expected an integer >= 1, got "two"',
        ),
        (
            {"maxNumOfEndpoints": 0},
            '(max-score-picker "p"): parameters.maxNumOfEndpoints: expected an integer >= 1, got 0',
        ),
        (
            {"maxNumOfEndpoints": True},
            '(max-score-picker "p"): parameters.maxNumOfEndpoints: expected an integer >= 1, got true',
        ),
        ({"threshold": 1.5}, "parameters.threshold: expected a number >= 0 and <= 1, got 1.5"),
        ({"autoTune": "yes"}, 'parameters.autoTune: expected a boolean (true or false), got "yes"'),
        ({"mode": "x"}, 'parameters.mode: expected one of "kv", "queue", got "x"'),
        ({"names": [1]}, "parameters.names: expected a list of strings, got [1]"),
        ({"labels": {"a": 1}}, "parameters.labels: expected a mapping of strings to strings"),
        ({"limit": 0}, "parameters.limit: expected an integer > 0 or null, got 0"),
        (
            {"maxNumOfEndpoint": 2},
            'parameters.maxNumOfEndpoint: unknown parameter; did you mean "maxNumOfEndpoints"? (allowed: ',
        ),
        ([1, 2], "parameters: expected a mapping, got [1, 2]"),
    ],
)
def test_invalid_values_name_plugin_parameter_and_expectation(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(raw)
    assert message in str(info.value)


def test_required_parameter() -> None:
    expected = r"parameters\.target: required parameter missing: expected a string"
    with pytest.raises(ConfigError, match=expected):
        parse_params(Required, {}, "t", "n")
    assert parse_params(Required, {"target": "x"}, "t", "n").target == "x"


def test_params_to_dict_renders_every_field() -> None:
    rendered = params_to_dict(parse({"names": ["a"]}))
    assert rendered == {
        "maxNumOfEndpoints": 1,
        "threshold": 0.8,
        "autoTune": True,
        "mode": "kv",
        "names": ["a"],
        "labels": {},
        "limit": None,
        "headerName": "x-session-token",
    }


def test_cross_field_validation_in_post_init() -> None:
    @dataclass(frozen=True, slots=True)
    class Range:
        low: int = param(0)
        high: int = param(10)

        def __post_init__(self) -> None:
            if self.low > self.high:
                raise ValueError("low must not exceed high")

    with pytest.raises(ConfigError, match=r'\(t "n"\): parameters: low must not exceed high'):
        parse_params(Range, {"low": 5, "high": 1}, "t", "n")
