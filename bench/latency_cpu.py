"""Added picker CPU of the predicted-latency profile, per request, against the default profile.

Both schedulers are built from their configuration files (``deploy/configs/predicted-latency.yaml``,
the built-in default) over the same pool of ``endpoints`` endpoints and the same seeded shared-prefix
requests (32 groups, a half-prompt system prompt each, 8k characters in all, ``x-slo-ttft-ms`` /
``x-slo-tpot-ms`` headers). Each request goes through what the server calls for it: ``schedule``,
``dispatched``, ``response_headers``, one ``response_chunk`` and ``completed`` (streamed, 64 output
tokens), on a simulated clock whose TTFT depends on the endpoint and the uncached share of the prompt,
so the model learns and predicts as it does in service. The first ``warm`` requests warm the prefix
index and the latency model; the CPU time of the whole process (``time.process_time``: the caller's
thread *and* the model's background trainer, waited for until it has folded every sample in) is then
measured over ``requests`` requests. The difference per request is what the profile adds
(issue 18's target: at most 100 µs at 16 endpoints). The admitter's extra prediction pass for a
sheddable request with an SLO is not counted (requests here have priority 0).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from scheduler.config import default_config, load_config_text
from scheduler.config.resolved import ResolvedConfig
from scheduler.plugins.latency.producer import PredictedLatencyProducer
from scheduler.types import Completion, Endpoint, LLMRequest, Metrics, Outcome, Usage

__all__ = ["PREDICTED_CONFIG_PATH", "TARGET_US", "CpuFigures", "measure_added_cpu"]

PREDICTED_CONFIG_PATH = (
    Path(__file__).resolve().parent.parent / "deploy" / "configs" / "predicted-latency.yaml"
)
TARGET_US = 100.0
_ALPHABET = "abcdefghijklmnopqrstuvwxyz     ,.0123456789"
_GROUPS = 32


@dataclass(frozen=True, slots=True)
class CpuFigures:
    endpoints: int
    requests: int
    default_us: float
    predicted_us: float
    model_ready: bool

    @property
    def added_us(self) -> float:
        return self.predicted_us - self.default_us


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _requests(rng: random.Random, count: int, prompt_chars: int) -> list[LLMRequest]:
    systems = ["".join(rng.choices(_ALPHABET, k=prompt_chars // 2)) for _ in range(_GROUPS)]
    headers = {"x-slo-ttft-ms": "400", "x-slo-tpot-ms": "50"}
    out = []
    for i in range(count):
        text = rng.choice(systems) + "".join(rng.choices(_ALPHABET, k=prompt_chars - prompt_chars // 2))
        out.append(
            LLMRequest(
                f"r{i}",
                "llama",
                "llama",
                prompt_text=text,
                token_estimate=len(text) // 4,
                headers=headers,
                stream=True,
            )
        )
    return out


def _pool(n: int, rng: random.Random) -> list[Endpoint]:
    return [
        Endpoint(
            f"10.0.{i}.1:8000",
            metrics=Metrics(
                running_requests=rng.randint(0, 8), kv_cache_usage=rng.random() * 0.8, updated_at=1.0
            ),
        )
        for i in range(n)
    ]


def _drive(
    config: ResolvedConfig, clock: _Clock, pool: list[Endpoint], requests: list[LLMRequest], warm: int
) -> float:
    """Process CPU seconds of the requests after the first ``warm`` (see the module docstring)."""
    scheduler = config.build_scheduler()
    producers = [r.plugin for r in config.plugins if isinstance(r.plugin, PredictedLatencyProducer)]
    speed = {e.address: 1.0 + (i % 4) * 0.5 for i, e in enumerate(pool)}
    start = 0.0
    for i, request in enumerate(requests):
        if i == warm:
            for p in producers:  # the warm-up's samples are folded in before the clock starts
                _settle(p)
            start = time.process_time()
        result = scheduler.schedule(request, pool)
        address = result.primary.address if result.primary is not None else pool[0].address
        scheduler.dispatched(request, result)
        clock.now += 0.03 * speed[address]
        scheduler.response_headers(request, result, 200, {})
        scheduler.response_chunk(request, result, b"data: {}\n\n")
        clock.now += 0.64 * speed[address]
        scheduler.completed(request, result, Completion(Outcome.OK, usage=Usage(completion_tokens=64)))
    for p in producers:
        _settle(p)
    return time.process_time() - start


def _settle(producer: PredictedLatencyProducer) -> None:
    deadline = time.monotonic() + 30.0
    while producer.model.pending and time.monotonic() < deadline:
        time.sleep(0.01)


def measure_added_cpu(
    endpoints: int = 16, requests: int = 2000, warm: int = 500, seed: int = 1
) -> CpuFigures:
    """Per-request process CPU of both profiles (µs) on the same workload."""
    figures = {}
    ready = False
    for name in ("default", "predicted"):
        rng = random.Random(seed)
        pool = _pool(endpoints, rng)
        stream = _requests(rng, warm + requests, 8192)
        clock = _Clock()
        if name == "default":
            config = default_config(seed=seed, clock=clock)
        else:
            config = load_config_text(
                PREDICTED_CONFIG_PATH.read_text(encoding="utf-8"), seed=seed, clock=clock
            )
        figures[name] = _drive(config, clock, pool, stream, warm) / requests * 1e6
        if name == "predicted":
            ready = any(
                r.plugin.model.ready for r in config.plugins if isinstance(r.plugin, PredictedLatencyProducer)
            )
    return CpuFigures(endpoints, requests, figures["default"], figures["predicted"], ready)
