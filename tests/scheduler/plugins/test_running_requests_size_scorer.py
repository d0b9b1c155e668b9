import pytest

from scheduler.cycle_state import CycleState
from scheduler.handle import PluginHandle
from scheduler.plugins.scorers.running_requests import RunningRequestsSizeScorer, factory
from scheduler.types import Endpoint, LLMRequest, Metrics

REQ = LLMRequest(request_id="r", model="m", target_model="m")


def eps(*running: int) -> list[Endpoint]:
    return [Endpoint(f"10.0.0.{i}:8000", metrics=Metrics(running_requests=r)) for i, r in enumerate(running)]


@pytest.mark.parametrize(
    ("running", "expected"),
    [
        ((), []),
        ((3,), [1.0]),
        ((4, 4, 4), [1.0, 1.0, 1.0]),
        ((0, 10), [1.0, 0.0]),
        ((2, 4, 6), [1.0, 0.5, 0.0]),
        ((10, 5, 0), [0.0, 0.5, 1.0]),
    ],
)
def test_scores(running: tuple[int, ...], expected: list[float]) -> None:
    scorer = RunningRequestsSizeScorer("s")
    assert scorer.score(CycleState(), REQ, eps(*running)) == pytest.approx(expected)


def test_factory_rejects_parameters() -> None:
    from scheduler.errors import ConfigError

    assert factory("x", {}, PluginHandle()).name == "x"
    with pytest.raises(ConfigError, match="takes no parameters"):
        factory("x", {"foo": 1}, PluginHandle())
