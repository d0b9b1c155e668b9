import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.ready import ReadyFilter, ReadyParams, factory
from scheduler.types import Endpoint, LLMRequest, Metrics

REQ = LLMRequest(request_id="r", model="m", target_model="m")
NOW = 100.0


def ep(name: str, *, ready: bool = True, age: float | None = 0.5, draining: bool | None = None) -> Endpoint:
    updated = 0.0 if age is None else NOW - age
    attributes = {} if draining is None else {"draining": draining}
    return Endpoint(
        f"{name}:8000", name=name, ready=ready, metrics=Metrics(updated_at=updated), attributes=attributes
    )


FRESH = ep("fresh")
NOT_READY = ep("notready", ready=False)
DRAINING = ep("draining", draining=True)
NOT_DRAINING = ep("notdraining", draining=False)
STALE = ep("stale", age=2.5)
EDGE = ep("edge", age=2.0)
NEVER = ep("never", age=None)
ALL = [FRESH, NOT_READY, DRAINING, NOT_DRAINING, STALE, EDGE, NEVER]


@pytest.mark.parametrize(
    ("params", "expected", "reasons"),
    [
        (
            ReadyParams(),
            [FRESH, NOT_DRAINING, EDGE],
            [
                (NOT_READY, "not ready"),
                (DRAINING, "draining"),
                (STALE, "metrics stale: 2.500 s old > 2.0 s"),
                (NEVER, "metrics never scraped"),
            ],
        ),
        (ReadyParams(metrics_staleness_threshold=5.0), [FRESH, NOT_DRAINING, STALE, EDGE], None),
        (ReadyParams(metrics_staleness_threshold=None), [FRESH, NOT_DRAINING, STALE, EDGE, NEVER], None),
    ],
)
def test_filter(
    params: ReadyParams, expected: list[Endpoint], reasons: list[tuple[Endpoint, str]] | None
) -> None:
    f = ReadyFilter("r", params)
    cycle = CycleState(now=NOW)
    assert list(f.filter(cycle, REQ, ALL)) == expected
    for endpoint, reason in reasons or []:
        assert f.reason(cycle, REQ, endpoint) == reason


@pytest.mark.parametrize(
    ("raw", "seconds"), [("200ms", 0.2), ("2s", 2.0), ("1m30s", 90.0), (3, 3.0), (None, None), ("0", 0.0)]
)
def test_threshold_parameter(raw: object, seconds: float | None) -> None:
    f = factory("r", {"metricsStalenessThreshold": raw}, PluginHandle())
    assert isinstance(f, ReadyFilter) and f.params == ReadyParams(seconds)


@pytest.mark.parametrize("raw", ["2 seconds", "-1s", "", True, [1]])
def test_bad_threshold(raw: object) -> None:
    with pytest.raises(ConfigError, match=r'ready-filter "r"\): parameters\.metricsStalenessThreshold'):
        factory("r", {"metricsStalenessThreshold": raw}, PluginHandle())
