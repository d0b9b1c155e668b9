import random

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.legacy import (
    LeastKvCacheFilter,
    LeastQueueFilter,
    LegacyLoraAffinityFilter,
    LegacyLoraAffinityParams,
    LowQueueFilter,
    LowQueueParams,
    lora_affinity_factory,
    low_queue_factory,
)
from scheduler.types import Endpoint, LLMRequest, Metrics

REQ = LLMRequest(request_id="r", model="m", target_model="m")


def eps(**series: list[float]) -> list[Endpoint]:
    n = len(next(iter(series.values())))
    out = []
    for i in range(n):
        kwargs = {k: v[i] for k, v in series.items()}
        out.append(Endpoint(f"10.0.0.{i}:8000", metrics=Metrics(**kwargs)))  # type: ignore[arg-type]
    return out


def kept(f: object, endpoints: list[Endpoint], request: LLMRequest = REQ) -> list[int]:
    result = f.filter(CycleState(), request, endpoints)  # type: ignore[attr-defined]
    return [endpoints.index(e) for e in result]


@pytest.mark.parametrize(
    ("queues", "expected"),
    [
        ([], []),
        ([3], [0]),
        ([0, 10, 20, 30], [0]),  # band 0..7
        ([0, 8, 7, 30], [0, 2]),
        ([5, 5, 5], [0, 1, 2]),
        ([0, 1, 2], [0]),  # (2 - 0) // 3 == 0
    ],
)
def test_least_queue(queues: list[int], expected: list[int]) -> None:
    endpoints = eps(waiting_queue_size=queues) if queues else []
    assert kept(LeastQueueFilter("q"), endpoints) == expected


@pytest.mark.parametrize(
    ("usage", "expected"),
    [([0.1, 0.5, 0.9], [0]), ([0.0, 0.2, 0.8, 0.6], [0, 1]), ([0.4, 0.4], [0, 1])],
)
def test_least_kv_cache(usage: list[float], expected: list[int]) -> None:
    assert kept(LeastKvCacheFilter("k"), eps(kv_cache_usage=usage)) == expected


def test_low_queue() -> None:
    endpoints = eps(waiting_queue_size=[0, 128, 129, 500])
    assert kept(LowQueueFilter("l"), endpoints) == [0, 1]
    assert kept(LowQueueFilter("l", LowQueueParams(0)), endpoints) == [0]
    assert low_queue_factory("l", {"threshold": 5}, PluginHandle()).params == LowQueueParams(5)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="threshold"):
        low_queue_factory("l", {"threshold": -1}, PluginHandle())


AFFINITY = Endpoint("10.0.0.1:8000", metrics=Metrics(running_adapters=frozenset({"a"}), max_lora=1))
WAITING = Endpoint(
    "10.0.0.2:8000",
    metrics=Metrics(waiting_adapters=frozenset({"a"}), running_adapters=frozenset({"b"}), max_lora=2),
)
AVAILABLE = Endpoint("10.0.0.3:8000", metrics=Metrics(running_adapters=frozenset({"b"}), max_lora=2))
FULL = Endpoint("10.0.0.4:8000", metrics=Metrics(running_adapters=frozenset({"b", "c"}), max_lora=2))
LORA_POOL = [AFFINITY, WAITING, AVAILABLE, FULL]


def adapter_req(i: int, adapter: str | None = "a") -> LLMRequest:
    return LLMRequest(request_id=f"r{i}", model="m", target_model=adapter or "m", adapter=adapter)


@pytest.mark.parametrize(
    ("threshold", "pool", "expected"),
    [
        (1.0, LORA_POOL, [0, 1]),
        (0.0, LORA_POOL, [2]),
        (0.0, [AFFINITY, FULL], [0]),  # available empty: affinity regardless
        (1.0, [AVAILABLE, FULL], [0]),  # affinity empty: available
        (1.0, [FULL], []),  # both empty: nothing (GIE)
    ],
)
def test_lora_affinity(threshold: float, pool: list[Endpoint], expected: list[int]) -> None:
    f = LegacyLoraAffinityFilter("l", random.Random(0), LegacyLoraAffinityParams(threshold))
    assert kept(f, pool, adapter_req(1)) == expected


def test_lora_affinity_base_model_and_rate() -> None:
    f = LegacyLoraAffinityFilter("l", random.Random(0), LegacyLoraAffinityParams(0.9))
    assert kept(f, LORA_POOL, adapter_req(1, None)) == [0, 1, 2, 3]
    chose_affinity = sum(f.prefers_affinity(adapter_req(i)) for i in range(5000))
    assert 4300 < chose_affinity < 4700
    assert lora_affinity_factory("l", {}, PluginHandle()).params == LegacyLoraAffinityParams(0.999)  # type: ignore[attr-defined]
