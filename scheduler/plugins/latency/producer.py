"""``predicted-latency-producer`` (llm-d-router): per-endpoint TTFT/TPOT predictions, learnt in process.

Upstream trains XGBoost in two sidecars; pyepp learns the same targets with the in-process online
model of :mod:`scheduler.plugins.latency.model` (no sidecar, no new dependency). Optionally (sidecar
mode, :mod:`epp.server.latency_sidecar`, set up by upstream's environment variables) upstream's
prediction server answers instead: its predictions are fetched before scheduling and handed in
(:meth:`PredictedLatencyProducer.accept_remote`); the in-process model keeps learning and answers for
the requests the server did not (failure, timeout); every training sample is also queued for the
training server (:meth:`PredictedLatencyProducer.drain_samples`;
:mod:`scheduler.plugins.latency.sidecar_mode`). The per-endpoint in-flight counts are kept by
:mod:`scheduler.plugins.latency.inflight`.

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

Bounds (:mod:`~scheduler.plugins.latency.inflight`): at most :data:`PENDING_LIMIT` prefix matches (and as
many prediction sets) wait between scheduling and dispatch; at most :data:`CONTEXT_LIMIT` requests
tracked (the oldest dropped beyond), each for at most ``contextTTL``; the model's own bounds are in its
module.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.cycle_state import CycleState, StateKey
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle
from scheduler.observer import LatencyMetrics, LatencyReport, PluginMetrics
from scheduler.params import parse_params, plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.plugins.filters.kv_headroom import prompt_tokens
from scheduler.plugins.latency.inflight import (
    AWAITING_BLOCKS_LIMIT,
    CONTEXT_LIMIT,
    PENDING_LIMIT,
    InflightBook,
    RequestContext,
)
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
from scheduler.plugins.latency.sidecar_mode import SidecarMode, SidecarSample
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
_PREFILL = "prefill"


class PredictedLatencyProducer(InflightBook, SidecarMode, PrefixMatchConsumer, PluginBase):
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
        self._init_book()
        self._pending: OrderedDict[str, PrefixMatch | None] = OrderedDict()
        self._metrics: LatencyMetrics | None = None
        # Predictions of requests scheduled but not yet dispatched (only while metrics are bound).
        self._predicted: OrderedDict[str, dict[str, LatencyPredictionInfo]] = OrderedDict()
        self._background = background
        self._wake = threading.Event()
        self._trainer: threading.Thread | None = None
        self._init_sidecar()  # sidecar mode (sidecar_mode.py)

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
        ctx = RequestContext(
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
        self._forget_addresses(addresses)
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

    def dump_state(self) -> dict[str, Any]:
        """Model and in-flight state for ``/debug/plugins/state``."""
        state: dict[str, Any] = {
            "model": self.model.state(),
            "trackedRequests": len(self._contexts),
            "dispatchedRequests": dict(sorted(self._dispatched.items())[:100]),
            "prefillTokensInFlight": dict(sorted(self._prefill_tokens.items())[:100]),
        }
        sidecar = self._sidecar_dump()
        if sidecar is not None:
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
