import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.scorers.load_aware import LoadAwareParams, LoadAwareScorer, factory
from scheduler.types import Endpoint, LLMRequest, Metrics

REQ = LLMRequest(request_id="r", model="m", target_model="m")


def eps(*queues: int) -> list[Endpoint]:
    return [Endpoint(f"10.0.0.{i}:8000", metrics=Metrics(waiting_queue_size=q)) for i, q in enumerate(queues)]


@pytest.mark.parametrize(
    ("threshold", "queues", "expected"),
    [
        (128, (0,), [0.5]),
        (128, (64,), [0.25]),
        (128, (128, 500), [0.0, 0.0]),
        (128, (1,), [0.5 * 127 / 128]),
        (10, (0, 5, 10, 11), [0.5, 0.25, 0.0, 0.0]),
        (1, (0, 1), [0.5, 0.0]),
    ],
)
def test_scores(threshold: int, queues: tuple[int, ...], expected: list[float]) -> None:
    scorer = LoadAwareScorer("s", LoadAwareParams(threshold=threshold))
    assert scorer.score(CycleState(), REQ, eps(*queues)) == pytest.approx(expected)


@pytest.mark.parametrize("bad", [0, -5, "x", 1.5])
def test_bad_threshold_rejected(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"load-aware-scorer.*threshold"):
        factory("s", {"threshold": bad}, PluginHandle())


def test_default_threshold() -> None:
    scorer = factory("s", {}, PluginHandle())
    assert isinstance(scorer, LoadAwareScorer) and scorer.params == LoadAwareParams(128)
