import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.interfaces import SaturationDetector
from scheduler.plugins.saturation.utilization import UtilizationDetector, UtilizationParams, factory
from scheduler.types import Endpoint, LLMRequest, Metrics

REQ = LLMRequest(request_id="r", model="m", target_model="m")
NOW = 50.0


def ep(i: int, q: int = 0, kv: float = 0.0, age: float = 0.05) -> Endpoint:
    return Endpoint(
        f"10.0.0.{i}:8000", metrics=Metrics(waiting_queue_size=q, kv_cache_usage=kv, updated_at=NOW - age)
    )


IDLE = ep(1)
HALF = ep(2, q=2, kv=0.4)  # max(2/5, 0.4/0.8) = 0.5
QFULL = ep(3, q=5)
KVFULL = ep(4, kv=0.8)
STALE = ep(5, age=0.3)
NEVER = Endpoint("10.0.0.6:8000")


@pytest.mark.parametrize(
    ("endpoints", "saturation", "saturated", "kept"),
    [
        ([], 1.0, True, []),
        ([IDLE], 0.0, False, [IDLE]),
        ([HALF], 0.5, False, [HALF]),
        ([IDLE, QFULL], 0.5, False, [IDLE]),
        ([QFULL, KVFULL], 1.0, True, [QFULL, KVFULL]),  # none left: all kept
        ([HALF, STALE, NEVER], (0.5 + 1 + 1) / 3, False, [HALF]),
        ([STALE, NEVER, QFULL], 1.0, True, [STALE, NEVER, QFULL]),
        ([ep(7, q=50, kv=0.95), IDLE], 0.5, False, [IDLE]),  # capped per endpoint
    ],
)
def test_detector(
    endpoints: list[Endpoint], saturation: float, saturated: bool, kept: list[Endpoint]
) -> None:
    d = UtilizationDetector("u")
    assert isinstance(d, SaturationDetector)
    assert d.saturation(endpoints, NOW) == pytest.approx(saturation)
    assert d.is_saturated(endpoints, NOW) is saturated
    assert (d.saturation(endpoints, NOW) >= 1.0) is saturated
    assert list(d.filter(CycleState(now=NOW), REQ, endpoints)) == kept


def test_headroom_relaxes_filter_not_saturation() -> None:
    d = UtilizationDetector("u", UtilizationParams(headroom=0.5))
    endpoints = [ep(1, q=6), ep(2, q=8)]  # limit 7.5
    assert [e.address for e in d.filter(CycleState(now=NOW), REQ, endpoints)] == ["10.0.0.1:8000"]
    assert d.is_saturated(endpoints, NOW)
    assert d.reason(CycleState(now=NOW), REQ, endpoints[1]) == "queue 8 >= 7.5"


def test_reasons() -> None:
    d = UtilizationDetector("u")
    cycle = CycleState(now=NOW)
    assert d.reason(cycle, REQ, STALE) == "metrics stale"
    assert d.reason(cycle, REQ, KVFULL) == "KV cache usage 0.80 >= 0.80"


def test_parameters() -> None:
    d = factory(
        "u",
        {
            "queueDepthThreshold": 10,
            "kvCacheUtilThreshold": 0.9,
            "metricsStalenessThreshold": "2s",
            "headroom": 0.2,
        },
        PluginHandle(),
    )
    assert isinstance(d, UtilizationDetector) and d.params == UtilizationParams(10, 0.9, 2.0, 0.2)
    assert factory("u", {}, PluginHandle()).params == UtilizationParams(5, 0.8, 0.2, 0.0)  # type: ignore[attr-defined]
    for key, bad in [
        ("queueDepthThreshold", 0),
        ("kvCacheUtilThreshold", 1.5),
        ("metricsStalenessThreshold", "0s"),
    ]:
        with pytest.raises(ConfigError, match=f"parameters.{key}"):
            factory("u", {key: bad}, PluginHandle())
