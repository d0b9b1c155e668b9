"""``token-load-scorer``: fewer tokens in flight from this picker is better.

In-flight tokens of an endpoint = the sum, over requests this picker dispatched to it and that have
not completed, of the request's prompt token estimate (``request.token_estimate``) plus the output
tokens observed so far. Output tokens are counted from streamed chunks as the number of SSE
``data:`` events in each chunk (one token per event, as vLLM streams; ``bytes.count`` runs in C, so
per-chunk work is O(1) in the number of requests and allocation-free). Non-streamed responses add
nothing before completion: their body arrives at the end, when the request leaves the count.

Formula::

    score = 1 - min(inflight_tokens, threshold) / threshold

Accounting follows ``active-request-scorer``: counted against the primary endpoint on
``on_dispatched`` (once per request id), moved to the served endpoint when the proxy reports a
fallback served, removed on ``on_completed`` (idempotent) or after ``requestTimeout``.

Parameters: ``queueThresholdTokens`` (llm-d's name; alias ``threshold``; int >= 1, default
4,194,304 tokens); ``requestTimeout`` (duration, default ``"2m"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.saturation.duration import DURATION_EXPECT, parse_duration
from scheduler.plugins.scorers.inflight import InflightTracker
from scheduler.plugins.scorers.inflight_hooks import InflightHooks
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = ["DEFAULT_THRESHOLD", "TokenLoadParams", "TokenLoadScorer", "factory"]

_SSE_EVENT = b"data:"


DEFAULT_THRESHOLD = 4_194_304


@dataclass(frozen=True, slots=True)
class TokenLoadParams:
    queue_threshold_tokens: int | None = param(None, ge=1)
    threshold: int | None = param(None, ge=1)
    request_timeout: float = param(120.0, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0")

    def __post_init__(self) -> None:
        if self.queue_threshold_tokens is not None and self.threshold is not None:
            raise ValueError("give queueThresholdTokens or its alias threshold, not both")

    @property
    def effective_threshold(self) -> int:
        return self.queue_threshold_tokens or self.threshold or DEFAULT_THRESHOLD


class TokenLoadScorer(InflightHooks, PluginBase):
    plugin_type = "token-load-scorer"

    def __init__(self, name: str, clock: Callable[[], float], params: TokenLoadParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or TokenLoadParams()
        self._threshold = params.effective_threshold
        self.tracker = InflightTracker(clock, params.request_timeout)

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        tokens = self.tracker.token_counts
        if not tokens:
            return [1.0] * len(endpoints)
        threshold = self._threshold
        inv = 1.0 / threshold
        return [1.0 - min(tokens.get(e.address, 0), threshold) * inv for e in endpoints]

    def dispatch_tokens(self, request: LLMRequest) -> int:
        return request.token_estimate

    def on_response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None:
        if request.stream:
            self.tracker.add_tokens(request.request_id, chunk.count(_SSE_EVENT))


factory = factory_with_params(
    TokenLoadScorer.plugin_type,
    TokenLoadParams,
    lambda name, params, handle: TokenLoadScorer(name, handle.clock, params),
)
