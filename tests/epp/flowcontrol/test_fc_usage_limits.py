"""Usage-limit policies: ceilings per band, and how the dispatch loop applies them."""

from __future__ import annotations

import math

import pytest

from epp.flowcontrol.queues import FlowQueues
from scheduler.errors import ConfigError
from scheduler.plugins.flowcontrol.usage_limit import (
    PriorityHoldback,
    PriorityHoldbackParams,
    SoftReflectiveCeiling,
    priority_holdback_factory,
)
from tests.epp.flowcontrol.fc_fakes import fc_config


@pytest.mark.parametrize(
    ("params", "priorities", "expected"),
    [
        (PriorityHoldbackParams(0.4, 0.9), [10, 5, 0], [0.9, 0.65, 0.4]),
        (PriorityHoldbackParams(0.4), [3], [1.0]),
        (PriorityHoldbackParams(0.0, 1.0, domain="value"), [10, 8, 0], [1.0, 0.8, 0.0]),
        (PriorityHoldbackParams(0.5, 1.0, domain="value"), [2, 2], [1.0, 1.0]),
    ],
)
def test_priority_holdback(
    params: PriorityHoldbackParams, priorities: list[int], expected: list[float]
) -> None:
    assert PriorityHoldback("p", params).ceilings(0.5, priorities) == pytest.approx(expected)


def test_priority_holdback_parameters() -> None:
    with pytest.raises(ConfigError, match="minCeiling"):
        priority_holdback_factory("p", {}, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="less than maxCeiling"):
        priority_holdback_factory("p", {"minCeiling": 0.8, "maxCeiling": 0.5}, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="domain"):
        priority_holdback_factory("p", {"minCeiling": 0.1, "domain": "log"}, None)  # type: ignore[arg-type]


def test_soft_reflective_ceiling() -> None:
    soft = SoftReflectiveCeiling("s")
    assert soft.ceilings(0.2, [9]) == [1.0]
    assert soft.ceilings(0.3, [9, 5, 0]) == [1.0, 1.0, 1.0]  # below every reflective ceiling
    assert soft.ceilings(1.0, [9, 5, 0]) == [1.0, 0.0, 0.0]  # saturated: only the top band
    # At 0.75 the lowest band (reflective ceiling 0.25) is gated: open on 1 decision in 3.
    opens = [soft.ceilings(0.75, [9, 0])[1] for _ in range(30)]
    assert sum(opens) == 10 and set(opens) == {0.0, 1.0}


def test_a_gated_band_stops_the_lower_ones() -> None:
    q = FlowQueues(fc_config())
    q.push(5, "a", 1, 0.0, math.inf, None)
    low = q.push(0, "a", 1, 0.0, math.inf, None)
    assert q.pop_next(lambda p: p != 5) is None  # band 5 gated: band 0 does not overtake it
    assert q.pop_next(lambda p: True) is not low
    assert q.pop_next(lambda p: p == 0) is low
