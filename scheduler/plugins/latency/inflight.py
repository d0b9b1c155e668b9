"""``predicted-latency-producer``'s book of its own dispatched requests (a mix-in of
:class:`~scheduler.plugins.latency.producer.PredictedLatencyProducer`, which owns the attributes it sets;
split out only to keep each module readable).

Per endpoint it counts this picker's requests not yet completed (``_dispatched``), those not yet past
their first token (``_prefilling``) and their uncached prefill tokens (``_prefill_tokens``), the prompts'
leading block hashes sent there and not yet prefilled (``_awaiting_blocks``, reference counts, at most
:data:`AWAITING_BLOCKS_LIMIT` per prompt), and the TPOT SLOs of the requests running there
(``_tpot_slos``). Bounds: :data:`CONTEXT_LIMIT` tracked requests (the oldest dropped beyond), each for at
most ``contextTTL``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from scheduler.plugins.latency.model import Features

__all__ = ["AWAITING_BLOCKS_LIMIT", "CONTEXT_LIMIT", "PENDING_LIMIT", "InflightBook", "RequestContext"]

CONTEXT_LIMIT = 65536
PENDING_LIMIT = 4096  # prefix matches (and prediction sets) kept between scheduling and dispatch
AWAITING_BLOCKS_LIMIT = 512  # leading block hashes per request counted as held until its first token


@dataclass(slots=True)
class RequestContext:
    """One dispatched request this producer tracks until it completes (or expires)."""

    ttft_endpoint: str
    tpot_endpoint: str
    features: Features
    tpot_features: Features
    dispatched_at: float
    deadline: float
    tpot_slo: float
    first_chunk_at: float | None = None
    status: int = 0  # the response's HTTP status (0: its headers were not seen)
    ttft_ms: float | None = None  # the TTFT trained on (streaming: at the first chunk)
    predicted_ttft: float = 0.0  # ms, the prediction for ttft_endpoint (metrics only)
    predicted_tpot: float = 0.0  # ms, the prediction for tpot_endpoint (metrics only)
    charges: list[tuple[str, int]] = field(default_factory=list)  # (address, prefill tokens)
    awaiting: tuple[int, ...] = ()  # the prompt's block hashes counted as held by ttft_endpoint
    ttft_pod: str = ""  # the endpoints' pod types (sidecar training samples)
    tpot_pod: str = ""


class InflightBook:
    """The per-endpoint in-flight counts (see the module docstring)."""

    def _init_book(self) -> None:
        self._contexts: OrderedDict[str, RequestContext] = OrderedDict()
        self._prefill_tokens: dict[str, int] = {}
        self._prefilling: dict[str, int] = {}  # requests per address not yet past their first token
        # Per address, the block hashes of the prompts of those requests (reference counts).
        self._awaiting_blocks: dict[str, dict[int, int]] = {}
        self._dispatched: dict[str, int] = {}
        self._tpot_slos: dict[str, dict[str, float]] = {}

    def _forget_addresses(self, addresses: frozenset[str]) -> None:
        for address in addresses:
            self._prefill_tokens.pop(address, None)
            self._prefilling.pop(address, None)
            self._awaiting_blocks.pop(address, None)
            self._dispatched.pop(address, None)
            self._tpot_slos.pop(address, None)

    def _release_prefill(self, ctx: RequestContext) -> None:
        for address, tokens in ctx.charges:
            left = self._prefill_tokens.get(address, 0) - tokens
            if left > 0:
                self._prefill_tokens[address] = left
            else:
                self._prefill_tokens.pop(address, None)
            waiting = self._prefilling.get(address, 0) - 1
            if waiting > 0:
                self._prefilling[address] = waiting
            else:
                self._prefilling.pop(address, None)
        ctx.charges.clear()
        if ctx.awaiting:
            held = self._awaiting_blocks.get(ctx.ttft_endpoint)
            if held is not None:
                for h in ctx.awaiting:
                    n = held.get(h, 0) - 1
                    if n > 0:
                        held[h] = n
                    else:
                        held.pop(h, None)
                if not held:
                    del self._awaiting_blocks[ctx.ttft_endpoint]
            ctx.awaiting = ()

    def _drop(self, request_id: str) -> RequestContext | None:
        ctx = self._contexts.pop(request_id, None)
        if ctx is None:
            return None
        self._release_prefill(ctx)
        for address in {ctx.ttft_endpoint, ctx.tpot_endpoint}:
            left = self._dispatched.get(address, 0) - 1
            if left > 0:
                self._dispatched[address] = left
            else:
                self._dispatched.pop(address, None)
        slos = self._tpot_slos.get(ctx.tpot_endpoint)
        if slos is not None:
            slos.pop(request_id, None)
            if not slos:
                del self._tpot_slos[ctx.tpot_endpoint]
        return ctx

    def _expire(self, now: float) -> None:
        contexts = self._contexts
        while contexts:
            request_id, ctx = next(iter(contexts.items()))
            if ctx.deadline > now:
                break
            self._drop(request_id)
