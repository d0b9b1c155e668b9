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
4,194,304 tokens); ``requestTimeout`` (duration, default ``"2m"``); ``inFlightLoadProducerName``
(llm-d-router: read that ``inflight-load-producer`` instead, and score ``1 - min(inflight +
uncached tokens of this request, threshold) / threshold``; see
:mod:`scheduler.plugins.shared.inflight_consumer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.interfaces import Handle
from scheduler.params import param, parse_params
from scheduler.plugins.base import PluginBase
from scheduler.plugins.shared.inflight import InflightTracker
from scheduler.plugins.shared.inflight_consumer import InflightLoadConsumer, check_own_tracking
from scheduler.plugins.shared.inflight_hooks import InflightHooks
from scheduler.types import EndpointView, LLMRequest, SchedulingResult

__all__ = ["DEFAULT_THRESHOLD", "TokenLoadParams", "TokenLoadScorer", "factory"]

_SSE_EVENT = b"data:"


DEFAULT_THRESHOLD = 4_194_304


@dataclass(frozen=True, slots=True)
class TokenLoadParams:
    queue_threshold_tokens: int | None = param(None, ge=1)
    threshold: int | None = param(None, ge=1)
    request_timeout: float = param(120.0, gt=0, convert=parse_duration, expect=DURATION_EXPECT + " > 0")
    in_flight_load_producer_name: str = param("")

    def __post_init__(self) -> None:
        if self.queue_threshold_tokens is not None and self.threshold is not None:
            raise ValueError("give queueThresholdTokens or its alias threshold, not both")

    @property
    def effective_threshold(self) -> int:
        return self.queue_threshold_tokens or self.threshold or DEFAULT_THRESHOLD


class TokenLoadScorer(InflightLoadConsumer, InflightHooks, PluginBase):
    plugin_type = "token-load-scorer"

    def __init__(self, name: str, clock: Callable[[], float], params: TokenLoadParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or TokenLoadParams()
        self._threshold = params.effective_threshold
        self.tracker = InflightTracker(clock, params.request_timeout)
        self.inflight_producer_name = params.in_flight_load_producer_name

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        producer = self.inflight_producer
        if producer is not None:  # llm-d-router: in-flight tokens plus this request's uncached tokens
            threshold, counts = self._threshold, producer.token_counts
            return [
                1.0
                - min(
                    counts.get(e.address, 0) + producer.uncached_tokens(cycle, request, e.address), threshold
                )
                / threshold
                for e in endpoints
            ]
        tokens = self.tracker.token_counts
        if not tokens:
            return [1.0] * len(endpoints)
        threshold = self._threshold
        inv = 1.0 / threshold
        return [1.0 - min(tokens.get(e.address, 0), threshold) * inv for e in endpoints]

    def dispatch_tokens(self, request: LLMRequest) -> int:
        return request.token_estimate

    def on_response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None:
        if request.stream and self.tracking:
            self.tracker.add_tokens(request.request_id, chunk.count(_SSE_EVENT))


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> TokenLoadScorer:
    plugin = TokenLoadScorer(
        name, handle.clock, parse_params(TokenLoadParams, parameters, TokenLoadScorer.plugin_type, name)
    )
    plugin.own_tracking = check_own_tracking(TokenLoadScorer.plugin_type, name, parameters)
    return plugin
