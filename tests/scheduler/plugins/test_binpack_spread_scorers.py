import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.scorers import binpack, spread
from scheduler.plugins.scorers.binpack import BinpackScorer
from scheduler.plugins.scorers.placement import PlacementParams
from scheduler.plugins.scorers.spread import SpreadScorer
from scheduler.types import Endpoint, LLMRequest, Metrics

REQ = LLMRequest(request_id="r", model="m", target_model="m")


def eps(*metrics: Metrics) -> list[Endpoint]:
    return [Endpoint(f"10.0.0.{i}:8000", metrics=m) for i, m in enumerate(metrics)]


KV = eps(
    Metrics(kv_cache_usage=0.0),
    Metrics(kv_cache_usage=0.5),
    Metrics(kv_cache_usage=0.9),
    Metrics(kv_cache_usage=1.0),
)
QUEUE = eps(Metrics(waiting_queue_size=0), Metrics(waiting_queue_size=5), Metrics(waiting_queue_size=10))
RUNNING = eps(Metrics(running_requests=64), Metrics(running_requests=300))


@pytest.mark.parametrize(
    ("params", "endpoints", "binpack_expected", "spread_expected"),
    [
        (PlacementParams(), KV, [0.0, 0.5, 0.9, 0.0], [1.0, 0.5, 0.1, 0.0]),
        (PlacementParams(capacity=0.8), KV, [0.0, 0.625, 0.0, 0.0], [1.0, 0.375, 0.0, 0.0]),
        (PlacementParams(load="queue", capacity=10), QUEUE, [0.0, 0.5, 0.0], [1.0, 0.5, 0.0]),
        (PlacementParams(load="queue"), QUEUE, [0.0, 5 / 128, 10 / 128], [1.0, 123 / 128, 118 / 128]),
        (PlacementParams(load="running"), RUNNING, [0.25, 0.0], [0.75, 0.0]),
    ],
)
def test_scores(
    params: PlacementParams,
    endpoints: list[Endpoint],
    binpack_expected: list[float],
    spread_expected: list[float],
) -> None:
    assert BinpackScorer("b", params).score(CycleState(), REQ, endpoints) == pytest.approx(binpack_expected)
    assert SpreadScorer("s", params).score(CycleState(), REQ, endpoints) == pytest.approx(spread_expected)


def test_binpack_prefers_fullest_that_fits() -> None:
    scores = BinpackScorer("b").score(CycleState(), REQ, KV)
    assert max(range(len(KV)), key=scores.__getitem__) == 2


@pytest.mark.parametrize("module", [binpack, spread])
def test_parameters(module: object) -> None:
    factory = module.factory  # type: ignore[attr-defined]
    plugin = factory("p", {"load": "running", "capacity": 16}, PluginHandle())
    assert plugin.params == PlacementParams("running", 16.0)
    with pytest.raises(ConfigError, match=r"parameters\.load.*one of"):
        factory("p", {"load": "gpu"}, PluginHandle())
    with pytest.raises(ConfigError, match=r"parameters\.capacity"):
        factory("p", {"capacity": 0}, PluginHandle())
