import pytest
from plugin_builders import DONE, endpoints, req, routed

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.interfaces import SaturationDetector
from scheduler.plugins.saturation.concurrency import ConcurrencyDetector, ConcurrencyParams, factory

EPS = endpoints(3)


@pytest.mark.parametrize(
    ("dispatch_to", "saturation", "saturated", "kept"),
    [
        ([], 0.0, False, [0, 1, 2]),
        ([0, 0], 1 / 3, False, [1, 2]),
        ([0, 0, 0, 1], (1 + 0.5) / 3, False, [1, 2]),  # capped at 1 per endpoint
        ([0, 0, 1, 1, 2, 2], 1.0, True, [0, 1, 2]),  # none left: all kept
    ],
)
def test_requests_mode(dispatch_to: list[int], saturation: float, saturated: bool, kept: list[int]) -> None:
    d = ConcurrencyDetector("c", lambda: 0.0, ConcurrencyParams(max_concurrency=2))
    assert isinstance(d, SaturationDetector)
    for n, i in enumerate(dispatch_to):
        d.on_dispatched(req(n), routed(EPS[i]))
    assert d.saturation(EPS, 0.0) == pytest.approx(saturation)
    assert d.is_saturated(EPS, 0.0) is saturated
    assert list(d.filter(CycleState(), req(99), EPS)) == [EPS[i] for i in kept]


def test_tokens_mode_and_completion() -> None:
    d = ConcurrencyDetector(
        "c", lambda: 0.0, ConcurrencyParams(concurrency_mode="tokens", max_token_concurrency=100)
    )
    d.on_dispatched(req(1, 60), routed(EPS[0]))
    d.on_dispatched(req(2, 60), routed(EPS[0]))
    assert list(d.filter(CycleState(), req(3), EPS)) == EPS[1:]
    assert d.reason(CycleState(), req(3), EPS[0]) == "120 tokens in flight >= limit 100"
    d.on_completed(req(1), routed(EPS[0]), DONE)
    d.on_completed(req(1), routed(EPS[0]), DONE)  # reported twice: counted once
    assert d.tracker.tokens(EPS[0].address) == 60
    assert list(d.filter(CycleState(), req(3), EPS)) == EPS


def test_empty_pool_is_saturated() -> None:
    d = ConcurrencyDetector("c", lambda: 0.0)
    assert d.saturation([], 0.0) == 1.0 and d.is_saturated([], 0.0)


def test_parameters() -> None:
    d = factory("c", {"maxConcurrency": 8, "headroom": 0.25, "concurrencyMode": "requests"}, PluginHandle())
    assert isinstance(d, ConcurrencyDetector) and d.params.max_concurrency == 8
    with pytest.raises(ConfigError, match="concurrencyMode"):
        factory("c", {"concurrencyMode": "bytes"}, PluginHandle())
    with pytest.raises(ConfigError, match="maxConcurrency"):
        factory("c", {"maxConcurrency": 0}, PluginHandle())
