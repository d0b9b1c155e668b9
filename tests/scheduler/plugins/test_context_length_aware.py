"""context-length-aware (llm-d's test tables)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.scorers import context_length
from scheduler.plugins.scorers.context_length import (
    DEFAULT_LABEL,
    ContextLengthAware,
    ContextLengthParams,
    parse_range,
    range_score,
)
from scheduler.types import Endpoint, LLMRequest


def ep(address: str, label: str | None) -> Endpoint:
    return Endpoint(address, labels={DEFAULT_LABEL: label} if label is not None else {})


def tokens(n: int) -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model="m", token_estimate=n)


EMPTY = LLMRequest(request_id="r", model="m", target_model="m")  # context length 0


@pytest.mark.parametrize(
    ("params", "ok"),
    [
        ({}, True),
        ({"label": ""}, False),
        ({"label": 3}, False),
        ({"enableFiltering": "yes"}, False),
        ({"x": 1}, False),
    ],
)
def test_factory(params: dict[str, Any], ok: bool) -> None:
    if ok:
        plugin = context_length.factory("c", params, PluginHandle())
        assert isinstance(plugin, ContextLengthAware) and plugin.params == ContextLengthParams()
    else:
        with pytest.raises(ConfigError, match=r'\(context-length-aware "c"\): parameters'):
            context_length.factory("c", params, PluginHandle())


def test_filter() -> None:
    pool = [ep("1:1", "0-100"), ep("2:2", "100-500"), ep("3:3", "0-2000"), ep("4:4", None)]
    plugin = ContextLengthAware("f", ContextLengthParams(enable_filtering=True))
    kept = plugin.filter(CycleState(), EMPTY, pool)
    assert [e.address for e in kept] == ["1:1", "3:3", "4:4"]
    assert ContextLengthAware("f").filter(CycleState(), EMPTY, pool) == pool  # scoring only: pass through
    assert [
        e.address for e in plugin.filter(CycleState(), tokens(42), [ep("1:1", "0-52"), ep("2:2", "142-242")])
    ] == ["1:1"]
    assert plugin.filter(CycleState(), EMPTY, [ep("1:1", "bad")]) == []


def test_score() -> None:
    pool = [ep("1:1", "0-20"), ep("2:2", "0-10000"), ep("3:3", "500-1000"), ep("4:4", None), ep("5:5", "x-y")]
    tight, wide, miss, none, bad = ContextLengthAware("s").score(CycleState(), EMPTY, pool)
    assert tight > wide > 0.3
    assert 0.0 < miss < 0.3 and wide > miss
    assert none == 0.5 and bad == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-100", (0, 100)),
        (" 10 - 20 ", (10, 20)),
        ("5-5", (5, 5)),
        ("", None),
        ("0-100-200", None),
        ("100-50", None),
        ("abc-100", None),
        ("1_0-20", None),  # Go's Atoi takes no underscores
    ],
)
def test_parse_range(text: str, expected: tuple[int, int] | None) -> None:
    assert parse_range(text) == expected


def test_range_score_fallback() -> None:
    small_max, large_max = range_score(9000, 0, 2048), range_score(9000, 0, 8192)
    assert 0.0 < small_max < large_max < 0.3
    far_min, close_min = range_score(50, 500, 2048), range_score(50, 100, 1024)
    assert 0.0 < far_min < close_min < 0.3
    assert range_score(14999, 0, 15000) > 0.3 > range_score(14999, 15001, 20000)
    assert range_score(7, 7, 7) == 1.0
    assert range_score(0, 0, 10000) == pytest.approx(0.3 + 0.7 * (0.7 * 0.5 + 0.3))
