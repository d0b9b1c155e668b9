"""``predicted-latency-producer`` (llm-d-router): per-endpoint TTFT/TPOT predictions, learnt in process.

Upstream trains XGBoost in two sidecars; pyepp learns the same targets with the in-process online
model of :mod:`scheduler.plugins.latency.model` (no sidecar, no new dependency). Optionally (sidecar
mode, :mod:`epp.server.latency_sidecar`, set up by upstream's environment variables) upstream's
prediction server answers instead: its predictions are fetched before scheduling and handed in
(:meth:`PredictedLatencyProducer.accept_remote`); the in-process model keeps learning and answers for
the requests the server did not (failure, timeout); every training sample is also queued for the
training server (:meth:`PredictedLatencyProducer.drain_samples`, at most :data:`SIDECAR_QUEUE_LIMIT`).

Per request and candidate endpoint it publishes a :class:`LatencyPredictionInfo` (read by
``latency-scorer``, ``slo-headroom-tier-filter``, ``latency-slo-admitter`` and
``prefix-cache-affinity-filter`` with ``ttftSource: latencyPredictor``), upstream's semantics:

* ``ttftHeadroom = ttftSLO - ttft`` with ``ttftSLO`` from ``x-slo-ttft-ms`` (0 when absent or not a
  number, so the headroom is then ``-ttft``); ``ttftValid = ttft < ttftSLO``;
* with ``streamingMode: true``: ``tpotHeadroom = bufferedTPOT - tpot`` where
  ``bufferedTPOT = x-slo-tpot-ms x sloBufferFactor``, lowered to the tightest TPOT SLO of the
  requests running on the endpoint (times ``sloBufferFactor``); ``tpotValid = tpot < bufferedTPOT``;
* otherwise (and for endpoints whose ``endpointRoleLabel`` label is ``prefill``) TPOT is neutralised:
  ``tpotValid`` true, ``tpotHeadroom`` 0.

Cold start (**ours**, ``coldStartPrior: true``): before the model has
:data:`~scheduler.plugins.latency.model.MIN_SAMPLES` samples, the TTFT predictions come from a prefill
prior (the prefill tokens ahead of and including the request over a measured, at first configured,
prefill rate; :mod:`scheduler.plugins.latency.prior`), blended out as the model warms. With
``coldStartPrior: false`` (upstream's behaviour) no predictions are published before then; nor ever
with ``predictInProduce: false`` (training only); consumers then fall back (the scorer to its composite
of KV, queue and prefix scores, the filters to keeping everything, the admitter to admitting).

The prefix match (``prefixMatchInfoProducerName``: the approximate index by default, or
``precise-prefix-cache-producer``, whose KV-event-fed index follows the servers' evictions) gives the
cached tokens; when it was cut from token ids it also gives the prompt's length in those tokens
(:attr:`~scheduler.plugins.prefix.match.PrefixMatch.prompt_tokens`), used instead of the request's
estimate so that both are counted alike. **Ours**: a prompt this picker dispatched to an endpoint that
has not produced its first token yet counts as cached there too (the leading block hashes the request
shares with it, at most :data:`AWAITING_BLOCKS_LIMIT` per prompt): a server announces a prompt's blocks
(KV events) only when it admits it, and a request queued behind it will hit them.

Training (lifecycle hooks): at dispatch the target's features are captured (prompt tokens, uncached
tokens from the prefix match, this picker's prefill tokens in flight and dispatched requests on the
endpoint, waiting queue, KV utilisation). TTFT is the time from dispatch to the first response chunk
with ``streamingMode: true``, to the end of the response otherwise (upstream's end-to-end mode); TPOT
(streaming only) is ``(end - first chunk) / (completion tokens - 1)``. In P/D the TTFT sample belongs to
the ``prefill`` profile's endpoint, TPOT to the decode one. As upstream, a streamed TTFT sample is trained
at the first chunk of a 2xx response (not at the end of the answer: the model warms up one answer
sooner); the TPOT sample and a non-streamed TTFT only when the request succeeds. Samples are
folded in by a background thread (:class:`~scheduler.plugins.latency.model.LatencyModel`), never on the
decision path.

Parameters: ``sloBufferFactor`` (> 0, 1.0), ``contextTTL`` (duration, "5m": a request with no
completion by then is dropped), ``streamingMode`` (false), ``endpointRoleLabel`` (""),
``predictInProduce`` (true), ``prefixMatchInfoProducerName`` (""); **ours**: ``coldStartPrior``
(true), ``coldStartPrefillThroughput`` (tokens/s > 0, 15928: the prior's rate before samples measure
one). Upstream's deprecated
``samplingMean`` / ``maxDecodeTokenSamplesForPrediction`` (ignored there), its multimodal
``useEncoderCacheFeatures`` / ``encoderCacheMatchInfoProducerName`` and ``inFlightLoadProducerName``
(this plugin keeps its own in-flight accounting) are rejected with a ConfigError saying so.

Metrics (upstream's ``predictedlatency/metrics.go``), when the scheduler's observer implements
:class:`scheduler.observer.LatencyMetrics`: per successful request, the actual TTFT / TPOT (as
trained on, above), the prediction made at scheduling time for the endpoint that served it (the
prefill endpoint's TTFT, the decode endpoint's TPOT; 0 when the model made none) and the SLO headers,
as a :class:`~scheduler.observer.LatencyReport`; per scheduling cycle whose candidates were predicted,
the seconds the predictions took. Without such an observer nothing is measured or kept.

Bounds: at most :data:`PENDING_LIMIT` prefix matches (and as many prediction sets) wait between
scheduling and dispatch; at most :data:`CONTEXT_LIMIT` requests tracked (the oldest dropped beyond),
each for at most ``contextTTL``; the model's own bounds are in its module.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.cycle_state import CycleState, StateKey
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle
from scheduler.observer import LatencyMetrics, LatencyReport, PluginMetrics
from scheduler.params import parse_params, plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.filters.kv_headroom import prompt_tokens
from scheduler.plugins.latency.info import (
    LATENCY_PREDICTION_INFO,
    REJECTED,
    TPOT_SLO_HEADER,
    TTFT_SLO_HEADER,
    LatencyPredictionInfo,
    PredictedLatencyParams,
    slo_header,
)
from scheduler.plugins.latency.model import Features, LatencyModel, train_loop
from scheduler.plugins.prefix.consumer import PrefixMatchConsumer
from scheduler.plugins.prefix.match import PrefixMatch
from scheduler.types import Completion, EndpointView, LLMRequest, Outcome, SchedulingResult

__all__ = [
    "CONTEXT_LIMIT",
    "LATENCY_PREDICTION_INFO",
    "TPOT_SLO_HEADER",
    "TTFT_SLO_HEADER",
    "LatencyPredictionInfo",
    "PredictedLatencyParams",
    "PredictedLatencyProducer",
    "SidecarSample",
    "factory",
    "slo_header",
]

DEFAULT_PRODUCER = "predicted-latency-producer"
CONTEXT_LIMIT = 65536
PENDING_LIMIT = 4096  # prefix matches kept between scheduling and dispatch
AWAITING_BLOCKS_LIMIT = 512  # leading block hashes per request counted as held until its first token
SIDECAR_QUEUE_LIMIT = 16384  # training samples waiting for the sidecar client (the oldest dropped beyond)
_PREFILL = "prefill"
_POD_TYPES = frozenset({"prefill", "decode"})


@dataclass(frozen=True, slots=True)
class SidecarSample:
    """One training sample for upstream's training server (sidecar mode): the features at dispatch and
    the observed latency; 0 marks the target a sample does not carry (upstream's convention)."""

    features: Features
    ttft_ms: float
    tpot_ms: float
    tokens_generated: int
    pod_type: str  # "prefill", "decode" or "" (the endpointRoleLabel label's value)
    at: float  # wall-clock seconds (time.time()) when observed


@dataclass(slots=True)
class _Context:
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


class PredictedLatencyProducer(PrefixMatchConsumer, PluginBase):
    params: PredictedLatencyParams
    plugin_type = "predicted-latency-producer"

    def __init__(
        self,
        name: str,
        clock: Callable[[], float],
        params: PredictedLatencyParams | None = None,
        model: LatencyModel | None = None,
        background: bool = True,
    ) -> None:
        super().__init__(name)
        self.params = params = params or PredictedLatencyParams()
        self.producer_name = params.prefix_match_info_producer_name
        self.model = model or LatencyModel(
            params.cold_start_prefill_throughput if params.cold_start_prior else None
        )
        self._clock = clock
        self._key = StateKey[Mapping[str, LatencyPredictionInfo] | None](f"{name}/predictions")
        self._contexts: OrderedDict[str, _Context] = OrderedDict()
        self._prefill_tokens: dict[str, int] = {}
        self._prefilling: dict[str, int] = {}  # requests per address not yet past their first token
        # Per address, the block hashes of the prompts of those requests (reference counts).
        self._awaiting_blocks: dict[str, dict[int, int]] = {}
        self._dispatched: dict[str, int] = {}
        self._tpot_slos: dict[str, dict[str, float]] = {}
        self._pending: OrderedDict[str, PrefixMatch | None] = OrderedDict()
        self._metrics: LatencyMetrics | None = None
        # Predictions of requests scheduled but not yet dispatched (only while metrics are bound).
        self._predicted: OrderedDict[str, dict[str, LatencyPredictionInfo]] = OrderedDict()
        self._background = background
        self._wake = threading.Event()
        self._trainer: threading.Thread | None = None
        # Sidecar mode (epp.server.latency_sidecar): predictions fetched before scheduling, per request
        # (at most PENDING_LIMIT), and the training samples waiting for the client (None: not in
        # sidecar mode; at most SIDECAR_QUEUE_LIMIT, the oldest dropped beyond).
        self._remote: OrderedDict[str, Mapping[str, tuple[float, float]]] = OrderedDict()
        self._remote_seconds: dict[str, float] = {}  # the fetch's duration, per request in _remote
        self._outbox: deque[SidecarSample] | None = None
        self._sidecar_state: Callable[[], Mapping[str, Any]] | None = None
        self.samples_dropped = 0
        self.remote_cycles = 0  # prediction sets that used the sidecar's predictions

    def produced_keys(self) -> frozenset[str]:
        return frozenset({f"{LATENCY_PREDICTION_INFO}/{self.name}"})

    # -- predictions --------------------------------------------------------------------------------

    def features(self, request: LLMRequest, endpoint: EndpointView, match: PrefixMatch | None) -> Features:
        """The model's features of ``request`` on ``endpoint`` now."""
        address = endpoint.address
        if match is None:
            prompt, cached = prompt_tokens(request), 0
        else:  # the match's tokens when it knows the prompt's (token ids), else the request's estimate
            prompt = match.prompt_tokens or prompt_tokens(request)
            cached = match.cached_tokens(address)
            held = self._awaiting_blocks.get(address)
            hashes, known = match.hashes, match.blocks(address)
            # a prompt sent there and not yet past its first token will be cached by then (checked only
            # when it may hold more than the match: one lookup per endpoint otherwise)
            if held and known < len(hashes) and hashes[known] in held:
                n = 0
                for h in hashes:
                    if h not in held:
                        break
                    n += 1
                cached = max(cached, n * match.block_size_tokens)
        metrics = endpoint.metrics
        return Features(
            input_tokens=prompt,
            uncached_tokens=max(0, prompt - cached),
            prefill_tokens_in_flight=self._prefill_tokens.get(address, 0),
            waiting=metrics.waiting_queue_size,
            running=self._dispatched.get(address, 0),
            kv_usage=metrics.kv_cache_usage,
            awaiting=self._prefilling.get(address, 0),
        )

    def predict(
        self, request: LLMRequest, endpoints: Sequence[EndpointView], match: PrefixMatch | None = None
    ) -> dict[str, LatencyPredictionInfo] | None:
        """Per-address predictions for ``request`` (None: cold model without the prior, or
        ``predictInProduce: false``)."""
        if not self.params.predict_in_produce:
            return None
        remote = self._remote.get(request.request_id)
        if remote is None and not self.model.predicts:
            return None
        ttft_slo = slo_header(request, TTFT_SLO_HEADER)
        tpot_slo = slo_header(request, TPOT_SLO_HEADER)
        factor, streaming, role = (
            self.params.slo_buffer_factor,
            self.params.streaming_mode,
            self.params.endpoint_role_label,
        )
        out: dict[str, LatencyPredictionInfo] = {}
        for endpoint in endpoints:
            address = endpoint.address
            predicted = remote.get(address) if remote is not None else None
            if predicted is None:
                predicted = self.model.predict(address, self.features(request, endpoint, match))
                if predicted is None:
                    return None
            ttft, tpot = predicted
            tpot_valid, tpot_headroom = True, 0.0
            if streaming and not (role and endpoint.labels.get(role) == _PREFILL):
                buffered = tpot_slo * factor
                running = self._tpot_slos.get(address)
                tightest = min((s for s in running.values() if s > 0), default=0.0) if running else 0.0
                if tightest > 0:
                    buffered = min(buffered, tightest * factor)
                tpot_valid, tpot_headroom = tpot < buffered, buffered - tpot
            out[address] = LatencyPredictionInfo(
                ttft < ttft_slo, tpot_valid, ttft_slo - ttft, tpot_headroom, ttft, tpot,
                self._dispatched.get(address, 0),
            )  # fmt: skip
        if remote is not None:
            self.remote_cycles += 1
        return out

    def admission_predictions(
        self, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> dict[str, LatencyPredictionInfo] | None:
        """Predictions for ``latency-slo-admitter``, which runs before the scheduling cycle: the prefix
        match is computed on a cycle state of its own (upstream runs its data producers, the prefix
        match among them, before the admission plugins), so a prompt an endpoint holds is predicted
        as cached there."""
        return self.predict(request, endpoints, self.prefix_match_for(CycleState(), request))

    # -- sidecar mode (upstream's latency predictor servers; the I/O is epp.server.latency_sidecar's) -----

    def enable_sidecar(self, training: bool, state: Callable[[], Mapping[str, Any]] | None = None) -> None:
        """Sidecar mode: predictions handed in by :meth:`accept_remote` take precedence over the
        in-process model's (which keeps learning: it answers whenever the sidecar did not); with
        ``training`` every sample is also queued for :meth:`drain_samples`. ``state``: the client's
        counters, shown in :meth:`dump_state`."""
        self._outbox = deque() if training else None
        self._sidecar_state = state

    def pod_type(self, endpoint: EndpointView) -> str:
        """Upstream's ``pod_type`` of ``endpoint``: its ``endpointRoleLabel`` label when that is
        ``prefill`` or ``decode``, else "" (monolithic)."""
        role = self.params.endpoint_role_label
        value = endpoint.labels.get(role, "") if role else ""
        return value if value in _POD_TYPES else ""

    def remote_features(
        self, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> list[tuple[EndpointView, Features]]:
        """The features to ask the prediction server about, one per endpoint (the prefix match on a
        cycle state of its own, as :meth:`admission_predictions`)."""
        match = self.prefix_match_for(CycleState(), request)
        return [(e, self.features(request, e, match)) for e in endpoints]

    def accept_remote(
        self, request_id: str, predictions: Mapping[str, tuple[float, float]] | None, seconds: float = 0.0
    ) -> None:
        """The prediction server's ``{address: (ttft_ms, tpot_ms)}`` for a request about to be
        scheduled (None: none, the in-process model answers), fetched in ``seconds`` (added to the
        prediction duration metric, which upstream measures around its bulk call). Kept until the
        request is dispatched or completes, at most :data:`PENDING_LIMIT` requests (the oldest
        dropped beyond)."""
        if predictions is None:
            self._forget_remote(request_id)
            return
        if len(self._remote) >= PENDING_LIMIT and request_id not in self._remote:
            self._forget_remote(next(iter(self._remote)))
        self._remote[request_id] = predictions
        self._remote_seconds[request_id] = seconds

    def _forget_remote(self, request_id: str) -> None:
        self._remote.pop(request_id, None)
        self._remote_seconds.pop(request_id, None)

    def drain_samples(self, limit: int) -> list[SidecarSample]:
        """Up to ``limit`` queued training samples, oldest first (removed from the queue)."""
        outbox = self._outbox
        if not outbox:
            return []
        return [outbox.popleft() for _ in range(min(limit, len(outbox)))]

    def queued_samples(self) -> int:
        return len(self._outbox) if self._outbox is not None else 0

    def _observe(
        self, address: str, features: Features, ttft: float | None, tpot: float | None, tokens: int, pod: str
    ) -> None:
        self.model.observe(address, features, ttft, tpot)
        outbox = self._outbox
        if outbox is not None:
            if len(outbox) >= SIDECAR_QUEUE_LIMIT:
                outbox.popleft()
                self.samples_dropped += 1
            outbox.append(SidecarSample(features, ttft or 0.0, tpot or 0.0, tokens, pod, time.time()))

    def dispatched(self, address: str) -> int:
        """Requests this picker dispatched to ``address`` that have not completed (nor expired)."""
        return self._dispatched.get(address, 0)

    def awaiting_first_token(self, address: str) -> int:
        """Requests this picker dispatched to ``address`` that have not produced a first token yet
        (queued or prefilling there; fresher than the scraped waiting queue)."""
        return self._prefilling.get(address, 0)

    def predictions(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Mapping[str, LatencyPredictionInfo] | None:
        """This cycle's predictions (memoised; the first caller's endpoints are the candidates)."""
        if self._key in cycle:
            found = cycle.read(self._key)
            if found is None or all(e.address in found for e in endpoints):
                return found
        metrics = self._metrics
        if metrics is None:
            found = self.predict(request, endpoints, self.prefix_match_for(cycle, request))
            cycle.write(self._key, found)
            return found
        start = time.perf_counter()
        found = self.predict(request, endpoints, self.prefix_match_for(cycle, request))
        seconds = time.perf_counter() - start + self._remote_seconds.pop(request.request_id, 0.0)
        cycle.write(self._key, found)
        if found is not None:
            metrics.latency_predicted(
                self.plugin_type, self.name, request.model, request.target_model, seconds
            )
            kept = self._predicted.get(request.request_id)
            if kept is None:
                if len(self._predicted) >= PENDING_LIMIT:
                    self._predicted.pop(next(iter(self._predicted)))
                self._predicted[request.request_id] = dict(found)
            else:
                kept.update(found)
        return found

    def bind_metrics(self, metrics: PluginMetrics) -> None:
        """Report to ``metrics`` when it implements :class:`~scheduler.observer.LatencyMetrics`."""
        self._metrics = metrics if isinstance(metrics, LatencyMetrics) else None

    # -- lifecycle ----------------------------------------------------------------------------------

    def prepare(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> None:
        if len(self._pending) >= PENDING_LIMIT:
            self._pending.pop(next(iter(self._pending)))
        self._pending[request.request_id] = self.prefix_match_for(cycle, request)

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        if request.request_id in self._contexts:
            return
        now = self._clock()
        self._expire(now)
        routed = {p: r for p, r in result.profile_results.items() if not r.shadow and r.targets}
        decode = routed.get(result.primary_profile) or next(iter(routed.values()), None)
        if decode is None:
            return
        prefill = routed.get(_PREFILL, decode)
        first, last = prefill.targets[0].endpoint, decode.targets[0].endpoint
        match = self._pending.pop(request.request_id, None)
        features = self.features(request, first, match)
        tpot_features = features if last is first else self.features(request, last, match)
        ctx = _Context(
            first.address, last.address, features, tpot_features, now, now + self.params.context_ttl,
            slo_header(request, TPOT_SLO_HEADER),
        )  # fmt: skip
        self._forget_remote(request.request_id)
        if self._outbox is not None:
            ctx.ttft_pod, ctx.tpot_pod = self.pod_type(first), self.pod_type(last)
        predicted = self._predicted.pop(request.request_id, None)
        if predicted is not None:
            ttft_info, tpot_info = predicted.get(first.address), predicted.get(last.address)
            ctx.predicted_ttft = ttft_info.ttft if ttft_info is not None else 0.0
            ctx.predicted_tpot = tpot_info.tpot if tpot_info is not None else 0.0
        ctx.charges.append((first.address, features.uncached_tokens))
        if match is not None and match.hashes:
            ctx.awaiting = keys = match.hashes[:AWAITING_BLOCKS_LIMIT]
            held = self._awaiting_blocks.setdefault(first.address, {})
            for h in keys:
                held[h] = held.get(h, 0) + 1
        self._prefilling[first.address] = self._prefilling.get(first.address, 0) + 1
        self._prefill_tokens[first.address] = (
            self._prefill_tokens.get(first.address, 0) + features.uncached_tokens
        )
        for address in {first.address, last.address}:
            self._dispatched[address] = self._dispatched.get(address, 0) + 1
        self._tpot_slos.setdefault(last.address, {})[request.request_id] = ctx.tpot_slo
        self._contexts[request.request_id] = ctx
        if len(self._contexts) > CONTEXT_LIMIT:
            self._drop(next(iter(self._contexts)))

    def on_response_headers(
        self, request: LLMRequest, result: SchedulingResult, status: int, headers: Mapping[str, str]
    ) -> None:
        ctx = self._contexts.get(request.request_id)
        if ctx is not None:
            ctx.status = status

    first_chunk_only = True  # the first token's time is all it reads (ResponseChunkHook)

    def on_response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None:
        ctx = self._contexts.get(request.request_id)
        if ctx is None or ctx.first_chunk_at is not None:
            return
        ctx.first_chunk_at = now = self._clock()
        self._release_prefill(ctx)
        if self.params.streaming_mode and (ctx.status == 0 or 200 <= ctx.status < 300):
            # Upstream records the TTFT sample at the first token: the model learns a request's TTFT
            # as soon as it is known, not after its whole answer (a faster warm-up).
            ctx.ttft_ms = ttft = (now - ctx.dispatched_at) * 1000.0
            self._observe(ctx.ttft_endpoint, ctx.features, ttft, None, 0, ctx.ttft_pod)
            self._train()

    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        self._pending.pop(request.request_id, None)
        self._predicted.pop(request.request_id, None)
        self._forget_remote(request.request_id)
        ctx = self._drop(request.request_id)
        if ctx is None or completion.outcome is not Outcome.OK:
            return
        end = self._clock()
        streaming = self.params.streaming_mode
        trained, ttft = ctx.ttft_ms is not None, ctx.ttft_ms
        if ttft is None:
            ttft = (end - ctx.dispatched_at) * 1000.0
        tpot: float | None = None
        tokens = completion.usage.completion_tokens
        if streaming and ctx.first_chunk_at is not None and tokens > 1:
            tpot = (end - ctx.first_chunk_at) * 1000.0 / (tokens - 1)
        if trained:
            if tpot is not None:
                self._observe(ctx.tpot_endpoint, ctx.tpot_features, None, tpot, tokens, ctx.tpot_pod)
        elif ctx.ttft_endpoint == ctx.tpot_endpoint:
            self._observe(ctx.ttft_endpoint, ctx.features, ttft, tpot, tokens, ctx.ttft_pod)
        else:
            self._observe(ctx.ttft_endpoint, ctx.features, ttft, None, 0, ctx.ttft_pod)
            if tpot is not None:
                self._observe(ctx.tpot_endpoint, ctx.tpot_features, None, tpot, tokens, ctx.tpot_pod)
        self._train()
        if self._metrics is not None and ttft > 0.0:
            self._metrics.latency_observed(self.plugin_type, self.name, LatencyReport(
                request.model, request.target_model, ttft / 1000.0, ctx.predicted_ttft / 1000.0,
                slo_header(request, TTFT_SLO_HEADER) / 1000.0, None if tpot is None else tpot / 1000.0,
                ctx.predicted_tpot / 1000.0, ctx.tpot_slo / 1000.0,
            ))  # fmt: skip

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        for address in addresses:
            self._prefill_tokens.pop(address, None)
            self._prefilling.pop(address, None)
            self._awaiting_blocks.pop(address, None)
            self._dispatched.pop(address, None)
            self._tpot_slos.pop(address, None)
        self.model.forget_endpoints(addresses)

    # -- internals ----------------------------------------------------------------------------------

    def _train(self) -> None:
        if not self._background:
            self.model.refit()
            return
        if self._trainer is None or not self._trainer.is_alive():
            self._trainer = threading.Thread(
                target=train_loop,
                args=(weakref.ref(self.model), self._wake),
                name=f"{self.name}-trainer",
                daemon=True,
            )
            self._trainer.start()
        self._wake.set()

    def _release_prefill(self, ctx: _Context) -> None:
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

    def _drop(self, request_id: str) -> _Context | None:
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

    def dump_state(self) -> dict[str, Any]:
        """Model and in-flight state for ``/debug/plugins/state``."""
        state: dict[str, Any] = {
            "model": self.model.state(),
            "trackedRequests": len(self._contexts),
            "dispatchedRequests": dict(sorted(self._dispatched.items())[:100]),
            "prefillTokensInFlight": dict(sorted(self._prefill_tokens.items())[:100]),
        }
        if self._sidecar_state is not None or self._outbox is not None:
            sidecar = dict(self._sidecar_state()) if self._sidecar_state is not None else {}
            sidecar.update(
                cyclesWithSidecarPredictions=self.remote_cycles,
                trainingSamplesQueued=self.queued_samples(),
                trainingSamplesDropped=self.samples_dropped,
            )
            state["sidecar"] = sidecar
        return state


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> PredictedLatencyProducer:
    plugin_type = PredictedLatencyProducer.plugin_type
    for key, why in REJECTED.items():
        if isinstance(parameters, Mapping) and key in parameters:
            raise ConfigError(
                f"{key} {why}", location=f"{plugin_location(plugin_type, name)}: parameters.{key}"
            )
    params = parse_params(PredictedLatencyParams, parameters, plugin_type, name)
    return PredictedLatencyProducer(name, handle.clock, params)
