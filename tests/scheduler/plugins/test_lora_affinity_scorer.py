import pytest

from scheduler.cycle_state import CycleState
from scheduler.plugins.scorers.lora_affinity import LoraAffinityScorer
from scheduler.types import Endpoint, LLMRequest, Metrics


def req(adapter: str | None) -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model=adapter or "base", adapter=adapter)


def ep(running: set[str] = frozenset(), waiting: set[str] = frozenset(), max_lora: int = 0) -> Endpoint:
    m = Metrics(running_adapters=frozenset(running), waiting_adapters=frozenset(waiting), max_lora=max_lora)
    return Endpoint("10.0.0.1:8000", metrics=m)


@pytest.mark.parametrize(
    ("adapter", "endpoint", "expected"),
    [
        (None, ep(), 0.0),  # base-model request: looked up like an adapter, as GIE does
        (None, ep(running={"a"}, max_lora=1), 0.0),
        (None, ep(running={"a"}, max_lora=2), 0.8),
        ("a", ep(running={"a"}, max_lora=1), 1.0),  # running, even with no free slot
        ("a", ep(running={"a", "b"}, max_lora=4), 1.0),
        ("a", ep(running={"b"}, max_lora=2), 0.8),  # free slot
        ("a", ep(max_lora=1), 0.8),
        ("a", ep(waiting={"a"}, max_lora=4), 0.8),  # free slot wins over waiting
        ("a", ep(running={"b"}, waiting={"a"}, max_lora=2), 0.6),  # waiting, no slot
        ("a", ep(running={"b"}, waiting={"c"}, max_lora=2), 0.0),  # full
        ("a", ep(), 0.0),  # max_lora unknown, not loaded
        ("a", ep(waiting={"a"}), 0.6),
    ],
)
def test_scores(adapter: str | None, endpoint: Endpoint, expected: float) -> None:
    assert LoraAffinityScorer("l").score(CycleState(), req(adapter), [endpoint]) == [expected]


def test_aligned_with_input() -> None:
    endpoints = [ep(running={"a"}, max_lora=1), ep(running={"b"}, max_lora=1), ep(running={"b"}, max_lora=2)]
    assert LoraAffinityScorer("l").score(CycleState(), req("a"), endpoints) == [1.0, 0.0, 0.8]


def test_target_model_is_the_adapter_when_none_is_set() -> None:
    """The EPP sets no ``adapter``: GIE looks the target model up among the running adapters."""
    request = LLMRequest(request_id="r", model="sql-lora", target_model="sql-lora-1fdg2")
    endpoints = [ep(running={"foo", "bar"}), ep(running={"foo", "sql-lora-1fdg2"})]
    assert LoraAffinityScorer("l").score(CycleState(), request, endpoints) == [0.0, 1.0]
    no_model = LLMRequest(request_id="r", model="", target_model="")
    assert LoraAffinityScorer("l").score(CycleState(), no_model, endpoints) == [1.0, 1.0]
