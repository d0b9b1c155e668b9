"""The async pre-scheduling step of a stream: what runs (with I/O) between parsing a request and
scheduling it, since scheduler plugins do no I/O. Two kinds exist: ``token-producer``'s vLLM render
(:mod:`epp.server.render`) and ``predicted-latency-producer``'s prediction server call
(:mod:`epp.server.latency_sidecar`); with both, they run in that order (the predictions' prefix match
may use the rendered token ids)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from scheduler.types import LLMRequest

__all__ = ["PreSchedulingStep", "StepChain", "chain"]


class PreSchedulingStep(Protocol):
    def wants(self, request: LLMRequest) -> bool:
        """Whether ``request`` waits for the step."""
        ...

    async def render(self, request: LLMRequest, body: bytes) -> None:
        """Run the step for ``request`` (hands its results to the plugins). Never raises."""
        ...

    async def aclose(self) -> None: ...


class StepChain:
    """Several steps, run in order (each only for the requests it wants)."""

    def __init__(self, steps: Sequence[PreSchedulingStep]) -> None:
        self.steps = tuple(steps)

    def wants(self, request: LLMRequest) -> bool:
        return any(s.wants(request) for s in self.steps)

    async def render(self, request: LLMRequest, body: bytes) -> None:
        for step in self.steps:
            if step.wants(request):
                await step.render(request, body)

    async def aclose(self) -> None:
        for step in self.steps:
            await step.aclose()


def chain(*steps: PreSchedulingStep | None) -> PreSchedulingStep | None:
    """The step that runs ``steps`` (the None ones left out); None when there is none."""
    present = [s for s in steps if s is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else StepChain(present)
