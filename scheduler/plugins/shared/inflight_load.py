"""``inflight-load-producer`` (llm-d-router): in-flight requests and tokens per endpoint, for consumers.

Consumers read its counts instead of keeping their own: ``active-request-scorer`` (requests) and
``token-load-scorer`` (tokens), selected by their ``inFlightLoadProducerName`` (default: the instance
named ``inflight-load-producer``, injected under ``llm-d.ai/v1alpha1``; see :mod:`scheduler.producers`).

Accounting, per dispatched request and per routed profile result (decode and, in P/D, prefill):

* ``on_dispatched``: the first target of each profile gets one request and ``tokens`` =
  the request's *uncached* prompt tokens there (``uncached = (total_blocks - matched_blocks) x
  block_tokens + prompt tokens beyond the hashed blocks``, from the prefix match of the producer named
  by ``prefixMatchInfoProducerName``, or the cycle's published match; the whole prompt without one)
  plus, with ``addEstimatedOutputTokens``, ``min(round(prompt x outputRatio), maxEstimatedOutputTokens)``;
  the prompt's tokens are the configured ``token-producer``'s id count (0 when it produced none), else
  pyepp's estimate (:class:`~scheduler.plugins.tokens.consumer.TokenCountReader`);
* first response chunk: without ``addEstimatedOutputTokens`` the prefill charge is released and the
  other charges drop their tokens (prefill compute is done); with it, only the prefill charge is
  released;
* ``on_completed``: everything left is released (idempotent); endpoints leaving the pool are dropped.

Metrics (llm-d-router's ``llm_d_epp_inflight_requests`` / ``llm_d_epp_inflight_tokens``, labelled
by endpoint, namespace, producer name, fairness id and priority): the producer registers itself with
the scheduler's :class:`~scheduler.observer.PluginMetrics`, which reads :meth:`inflight_samples` at
scrape time (the charges still held, summed per endpoint name, fairness id and priority); nothing
is recorded per request.

Parameters: ``addEstimatedOutputTokens`` (false), ``outputRatio`` (1.5, >= 0),
``maxEstimatedOutputTokens`` (none, >= 0), ``prefixMatchInfoProducerName`` (""),
``syncCrossReplicaState`` (true; only meaningful with a cross-replica syncer, which pyepp does not
have, so it changes nothing, as upstream without a syncer). Upstream also caps the output estimate by
the client's ``max_tokens``; pyepp's request carries no such field, so only the two caps above apply.

Bounds: requests still charged after :data:`STALE_SECONDS` (a completion that never came; the EPP
reports exactly one completion per dispatch) are released on the next dispatch; at most
:data:`PENDING_LIMIT` per-request prefix discounts wait between scheduling and dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Plugin
from scheduler.observer import InflightSample, PluginMetrics
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.filters.kv_headroom import prompt_tokens
from scheduler.plugins.prefix.consumer import PrefixMatchConsumer
from scheduler.plugins.prefix.match import PrefixMatch
from scheduler.plugins.shared.inflight import add_load
from scheduler.plugins.tokens.consumer import TokenCountReader
from scheduler.producers import DataNeed
from scheduler.types import Completion, EndpointView, LLMRequest, SchedulingResult

__all__ = [
    "INFLIGHT_LOAD",
    "PENDING_LIMIT",
    "STALE_SECONDS",
    "InflightLoadParams",
    "InflightLoadProducer",
    "factory",
]

INFLIGHT_LOAD = "InFlightLoad"
"""Data type of the in-flight counts (llm-d-router's ``InFlightLoadDataKey``)."""
STALE_SECONDS = 1800.0
PENDING_LIMIT = 1024
_PREFILL = "prefill"


@dataclass(frozen=True, slots=True)
class InflightLoadParams:
    add_estimated_output_tokens: bool = param(False)
    output_ratio: float = param(1.5, ge=0)
    max_estimated_output_tokens: int | None = param(None, ge=0)
    prefix_match_info_producer_name: str = param("")
    sync_cross_replica_state: bool = param(True)


class _Charge:
    __slots__ = ("address", "endpoint_name", "profile", "tokens")

    def __init__(self, address: str, endpoint_name: str, profile: str, tokens: int) -> None:
        self.address, self.endpoint_name, self.profile, self.tokens = address, endpoint_name, profile, tokens


class _Entry:
    __slots__ = ("charges", "deadline", "fairness_id", "priority", "started")

    def __init__(self, charges: list[_Charge], deadline: float, fairness_id: str, priority: int) -> None:
        self.charges, self.deadline, self.started = charges, deadline, False
        self.fairness_id, self.priority = fairness_id, priority


class InflightLoadProducer(TokenCountReader, PrefixMatchConsumer, PluginBase):
    plugin_type = "inflight-load-producer"
    prefix_match_optional = True  # upstream: an optional input (no producer is injected for it)
    params: InflightLoadParams

    def __init__(self, name: str, params: InflightLoadParams, clock: Callable[[], float]) -> None:
        super().__init__(name)
        self.params = params
        self.producer_name = params.prefix_match_info_producer_name
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._pending: dict[str, tuple[int, PrefixMatch | None]] = {}
        self._requests: dict[str, int] = {}
        self._tokens: dict[str, int] = {}

    def produced_keys(self) -> frozenset[str]:
        return frozenset({f"{INFLIGHT_LOAD}/{self.name}"})

    def data_needs(self) -> Sequence[DataNeed]:
        return (*super().data_needs(), self.token_need())

    def bind_producer(self, key: str, producer: Plugin | None) -> None:
        if not self.bind_tokens(key, producer):
            super().bind_producer(key, producer)

    # -- what consumers read -------------------------------------------------------------------------

    @property
    def request_counts(self) -> dict[str, int]:
        """Live per-address request counts (read-only by convention)."""
        return self._requests

    @property
    def token_counts(self) -> dict[str, int]:
        """Live per-address token counts (read-only by convention)."""
        return self._tokens

    def inflight_samples(self) -> Iterator[InflightSample]:
        """The charges held now, summed per (endpoint name, fairness id, priority); for the gauges."""
        sums: dict[tuple[str, str, int], list[int]] = {}
        for entry in self._entries.values():
            for charge in entry.charges:
                key = (charge.endpoint_name, entry.fairness_id, entry.priority)
                acc = sums.get(key)
                if acc is None:
                    sums[key] = [1, charge.tokens]
                else:
                    acc[0] += 1
                    acc[1] += charge.tokens
        for (endpoint, fairness_id, priority), (requests, tokens) in sums.items():
            yield InflightSample(endpoint, fairness_id, priority, requests, tokens)

    def bind_metrics(self, metrics: PluginMetrics) -> None:
        metrics.watch_inflight_load(self)

    def uncached_tokens(self, cycle: CycleState, request: LLMRequest, address: str) -> int:
        """This request's prompt tokens ``address`` does not hold (the prefix discount applied)."""
        return _uncached(self.prompt_length(cycle, request), self.prefix_match_for(cycle, request), address)

    # -- lifecycle -----------------------------------------------------------------------------------

    def prepare(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> None:
        if len(self._pending) >= PENDING_LIMIT:
            self._pending.pop(next(iter(self._pending)))
        self._pending[request.request_id] = (
            self.prompt_length(cycle, request),
            self.prefix_match_for(cycle, request),
        )

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        if request.request_id in self._entries:
            return
        now = self._clock()
        self._expire(now)
        prompt, match = self._pending.pop(request.request_id, (prompt_tokens(request), None))
        output = self._output_estimate(prompt)
        charges = []
        for profile, profile_result in result.profile_results.items():
            if profile_result.shadow or not profile_result.targets:
                continue
            endpoint = profile_result.targets[0].endpoint
            address = endpoint.address
            tokens = _uncached(prompt, match, address) + output
            charge = _Charge(address, endpoint.name or address, profile, tokens)
            self._add(address, 1, charge.tokens)
            charges.append(charge)
        if charges:
            self._entries[request.request_id] = _Entry(
                charges, now + STALE_SECONDS, request.fairness_id, request.priority
            )

    def on_response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None:
        entry = self._entries.get(request.request_id)
        if entry is None or entry.started:
            return
        entry.started = True
        keep = []
        for charge in entry.charges:
            if charge.profile == _PREFILL:
                self._add(charge.address, -1, -charge.tokens)
                continue
            if not self.params.add_estimated_output_tokens and charge.tokens:
                self._add(charge.address, 0, -charge.tokens)
                charge.tokens = 0
            keep.append(charge)
        entry.charges = keep

    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        self._pending.pop(request.request_id, None)
        self._release(request.request_id)

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        for address in addresses:
            self._requests.pop(address, None)
            self._tokens.pop(address, None)
        for entry in self._entries.values():
            entry.charges = [c for c in entry.charges if c.address not in addresses]

    # -- internals -----------------------------------------------------------------------------------

    def _output_estimate(self, prompt: int) -> int:
        if not self.params.add_estimated_output_tokens:
            return 0
        estimate = round(prompt * self.params.output_ratio)
        cap = self.params.max_estimated_output_tokens
        return estimate if cap is None else min(estimate, cap)

    def _release(self, request_id: str) -> None:
        entry = self._entries.pop(request_id, None)
        if entry is not None:
            for charge in entry.charges:
                self._add(charge.address, -1, -charge.tokens)

    def _add(self, address: str, requests: int, tokens: int) -> None:
        add_load(self._requests, self._tokens, address, requests, tokens)

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries:
            request_id = next(iter(entries))
            if entries[request_id].deadline > now:
                return
            self._release(request_id)


def _uncached(prompt: int, match: PrefixMatch | None, address: str) -> int:
    """Upstream's uncachedInputTokens: unmatched hashed blocks plus the unhashed tail."""
    if match is None or match.block_size_tokens <= 0:
        return max(0, prompt)
    block = match.block_size_tokens
    indexed = match.total_blocks * block
    matched = match.blocks(address) * block
    return max(0, indexed - matched) + max(0, prompt - indexed)


factory = factory_with_params(
    InflightLoadProducer.plugin_type,
    InflightLoadParams,
    lambda name, params, handle: InflightLoadProducer(name, params, handle.clock),
)
