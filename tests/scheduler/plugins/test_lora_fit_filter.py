import pytest

from scheduler.cycle_state import CycleState
from scheduler.plugins.filters.lora_fit import LoraFitFilter
from scheduler.types import Endpoint, LLMRequest, Metrics


def ep(
    i: int, running: set[str] = frozenset(), waiting: set[str] = frozenset(), max_lora: int = 2
) -> Endpoint:
    m = Metrics(running_adapters=frozenset(running), waiting_adapters=frozenset(waiting), max_lora=max_lora)
    return Endpoint(f"10.0.0.{i}:8000", metrics=m)


LOADED = ep(1, running={"a", "b"})
FREE = ep(2, running={"b"})
FULL = ep(3, running={"b", "c"})
WAITING_FULL = ep(4, running={"b"}, waiting={"a"})
UNKNOWN = ep(5, max_lora=0)


def req(adapter: str | None) -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model=adapter or "m", adapter=adapter)


@pytest.mark.parametrize(
    ("adapter", "endpoints", "expected"),
    [
        (None, [LOADED, FULL], [LOADED, FULL]),
        ("a", [LOADED, FREE, FULL, WAITING_FULL, UNKNOWN], [LOADED, FREE]),
        ("c", [LOADED, FREE, FULL], [FREE, FULL]),
        ("z", [LOADED, FULL, WAITING_FULL], [LOADED, FULL, WAITING_FULL]),  # none fits: keep all
        ("a", [], []),
    ],
)
def test_filter(adapter: str | None, endpoints: list[Endpoint], expected: list[Endpoint]) -> None:
    assert list(LoraFitFilter("l").filter(CycleState(), req(adapter), endpoints)) == expected


def test_reason() -> None:
    reason = LoraFitFilter("l").reason(CycleState(), req("a"), FULL)
    assert reason == "adapter 'a' not loaded and no free LoRA slot (2/2 used)"
