"""Builders shared by the plugin tests: endpoints, requests, routed scheduling results."""

from __future__ import annotations

from scheduler.types import (
    Completion,
    Endpoint,
    LLMRequest,
    Outcome,
    ProfileResult,
    SchedulingResult,
    ScoredEndpoint,
)

__all__ = ["DONE", "FakeClock", "endpoints", "req", "routed", "routed_pd"]

DONE = Completion(Outcome.OK)


class FakeClock:
    """A settable clock for plugins under test: call it for the time; set or advance ``now``."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def endpoints(n: int) -> list[Endpoint]:
    """``n`` endpoints ``10.0.0.0:8000`` ... ``10.0.0.{n-1}:8000`` with default metrics."""
    return [Endpoint(f"10.0.0.{i}:8000") for i in range(n)]


def req(i: int = 0, tokens: int = 0, stream: bool = False) -> LLMRequest:
    """Request ``r{i}`` for model ``m`` with a prompt token estimate of ``tokens``."""
    return LLMRequest(request_id=f"r{i}", model="m", target_model="m", token_estimate=tokens, stream=stream)


def routed(*targets: Endpoint) -> SchedulingResult:
    """A single-profile result routed to ``targets`` (the primary first, then fallbacks)."""
    scored = tuple(ScoredEndpoint(e, 1.0) for e in targets)
    return SchedulingResult("default", targets, {"default": ProfileResult("default", scored)})


def routed_pd(decode: Endpoint, prefill: Endpoint | None = None) -> SchedulingResult:
    """A P/D result: routed to ``decode``, with a ``prefill`` profile result when given."""
    results = {"decode": ProfileResult("decode", (ScoredEndpoint(decode, 1.0),))}
    if prefill is not None:
        results["prefill"] = ProfileResult("prefill", (ScoredEndpoint(prefill, 1.0),))
    return SchedulingResult("decode", (decode,), results)
