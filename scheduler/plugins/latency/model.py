"""The in-process latency model behind ``predicted-latency-producer``: online ridge regression.

Two targets, time to first token (TTFT) and time per output token (TPOT), each learnt by a
:class:`RidgeStats` (exponentially forgotten, weighted sufficient statistics ``A = sum g^k w x x^T``
and ``b = sum g^k w x y``, ``w = (100 ms / y)^2``: least squares on the *relative* error, see
:data:`REFERENCE_MS`) over engineered features of one request on one endpoint:

* TTFT: ``1, prefill tokens (this request's uncached tokens + the prefill tokens in flight ahead of
  it), prompt tokens, prefill tokens in flight, waiting queue, running requests, KV-cache
  utilisation`` (token counts in thousands);
* TPOT: ``1, running requests, waiting queue, KV-cache utilisation, prompt tokens``.

These are upstream's latency-predictor features (``kv_cache_percentage``, ``input_token_length``,
``num_request_waiting``, ``num_request_running``, ``prefix_cache_score``, prefill tokens in flight)
with the prefix score turned into what it costs, the uncached tokens. The prefill feature sums the
request's own uncached tokens and the work queued ahead of it, and the in-flight tokens come again
alone: the ridge penalty, pulling that second weight toward 0, then says "a token queued ahead costs
what one of this request's costs" until samples show otherwise, so a model that has seen only
uncached prompts already predicts queueing (measured: lower error in the first samples of the SLO
scenario). The in-flight and running counts are the picker's own (fresh at every decision), not
scraped.

Heterogeneous fleets: one global model per target plus one per endpoint, the endpoint's weights being
the ridge solution *shrunk toward the global weights*
(``w_e = (A_e + lambda I)^-1 (b_e + lambda w_global)``), so a new endpoint predicts like the fleet and
moves to its own speed as its samples arrive. The choice (against a global-only model and a per-endpoint
running mean) is measured by ``python -m bench.latency_model`` and documented in docs/scheduler-plugins.md.

Training is off the request path: :meth:`LatencyModel.observe` appends to a bounded buffer (O(1));
:meth:`LatencyModel.refit` drains it into the statistics and re-solves the weights, publishing them as
one immutable :class:`Weights` object that readers pick up atomically (no lock on the read side).
Memory: at most :data:`BUFFER_LIMIT` buffered samples and :data:`ENDPOINT_LIMIT` endpoint models
(O(d^2) floats each); the least recently updated endpoint model is dropped beyond that.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.plugins.latency.prior import PrefillPrior, learnt_share

__all__ = [
    "BUFFER_LIMIT",
    "ENDPOINT_LIMIT",
    "MIN_ENDPOINT_SAMPLES",
    "MIN_SAMPLES",
    "REFERENCE_MS",
    "REFIT_INTERVAL",
    "RIDGE",
    "TPOT_FEATURES",
    "TTFT_FEATURES",
    "Features",
    "LatencyModel",
    "RidgeStats",
    "Weights",
    "relative_weight",
    "train_loop",
]

TTFT_FEATURES = (
    "bias",
    "prefillKTokens",
    "inputKTokens",
    "prefillKTokensInFlight",
    "waitingQueue",
    "runningRequests",
    "kvCacheUsage",
)
TPOT_FEATURES = ("bias", "runningRequests", "waitingQueue", "kvCacheUsage", "inputKTokens")

BUFFER_LIMIT = 4096
"""Samples waiting for the next refit; beyond it the oldest are dropped (and counted)."""
ENDPOINT_LIMIT = 1024
"""Endpoint models kept; the least recently trained one is dropped beyond it."""
MIN_SAMPLES = 16
"""Samples the global model needs before it predicts (before: the cold-start prior, when on). 16 (it was
32): with TTFT learnt at the first token and the prefill prior above, the model predicts about a
second sooner in the SLO scenario, when the fleet is busiest."""
MIN_ENDPOINT_SAMPLES = 8
"""Samples an endpoint model needs before it replaces the global model for that endpoint."""
FORGET = 0.998
"""Weight of the older statistics per new sample (an effective window of about 500 samples); applied per
training batch."""
RIDGE = 1.0
"""Ridge penalty (global model: toward 0; endpoint model: toward the global weights)."""
REFERENCE_MS = 100.0
"""Relative-error weighting: a sample of latency ``y`` ms weighs ``(REFERENCE_MS / y)^2``, so the fit
minimises squared *relative* error (a 30 ms cache hit counts as much as a 1 s queued prefill, instead
of a thousandth as much); latencies below 1 ms weigh as 1 ms."""


def relative_weight(y: float) -> float:
    """The weight of a sample of ``y`` ms (see :data:`REFERENCE_MS`)."""
    return (REFERENCE_MS / max(y, 1.0)) ** 2


@dataclass(frozen=True, slots=True)
class Features:
    """One request on one endpoint, as the model sees it (raw units: tokens, counts, fraction)."""

    input_tokens: int
    uncached_tokens: int
    prefill_tokens_in_flight: int
    waiting: int
    running: int
    kv_usage: float
    awaiting: int = 0  # this picker's requests on the endpoint without a first token (the prior only)

    def ttft_vector(self) -> tuple[float, ...]:
        return (
            1.0,
            (self.uncached_tokens + self.prefill_tokens_in_flight) / 1000.0,
            self.input_tokens / 1000.0,
            self.prefill_tokens_in_flight / 1000.0,
            float(self.waiting),
            float(self.running),
            self.kv_usage,
        )

    def tpot_vector(self) -> tuple[float, ...]:
        return (1.0, float(self.running), float(self.waiting), self.kv_usage, self.input_tokens / 1000.0)


class RidgeStats:
    """Forgetting sufficient statistics of a linear least-squares problem in ``dim`` features."""

    __slots__ = ("a", "b", "count", "dim", "n", "weight")

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.a = [0.0] * (dim * dim)
        self.b = [0.0] * dim
        self.n = 0
        self.count = 0.0  # forgotten sample count, and forgotten sum of weights: their ratio is the
        self.weight = 0.0  # mean weight, which scales the ridge penalty to the data (see solve)

    def decay(self, samples: int) -> None:
        """Age the statistics by ``samples`` new samples (each weighs :data:`FORGET` less per newer
        one; applied once per training batch, so the samples of one batch weigh the same)."""
        f = FORGET**samples
        self.a = [v * f for v in self.a]
        self.b = [v * f for v in self.b]
        self.count *= f
        self.weight *= f

    def add(self, x: Sequence[float], y: float, weight: float = 1.0) -> None:
        """Fold one sample in with ``weight`` (call :meth:`decay` for the batch first). O(dim^2)."""
        d, a, b = self.dim, self.a, self.b
        for i in range(d):
            xi, row = x[i], i * d
            wxi = weight * xi
            b[i] += wxi * y
            for j in range(i, d):
                a[row + j] += wxi * x[j]
        self.n += 1
        self.count += 1.0
        self.weight += weight

    def matrix(self) -> list[list[float]]:
        """The symmetric ``A`` (only its upper triangle is accumulated)."""
        d, a = self.dim, self.a
        return [[a[min(i, j) * d + max(i, j)] for j in range(d)] for i in range(d)]

    def solve(self, ridge: float, prior: Sequence[float] | None = None) -> tuple[float, ...]:
        """``(A + r I)^-1 (b + r prior)`` (prior 0 when None), by Gaussian elimination, where
        ``r = ridge x`` the mean sample weight: the penalty keeps its strength relative to the data
        whatever the weights' scale (a slow endpoint's samples weigh little each)."""
        d = self.dim
        m = self.matrix()
        if self.count > 0:
            ridge *= self.weight / self.count
        for i in range(d):
            m[i][i] += ridge
        rhs = [self.b[i] + (ridge * prior[i] if prior is not None else 0.0) for i in range(d)]
        for col in range(d):
            pivot = max(range(col, d), key=lambda r: abs(m[r][col]))
            if abs(m[pivot][col]) < 1e-12:
                continue
            m[col], m[pivot] = m[pivot], m[col]
            rhs[col], rhs[pivot] = rhs[pivot], rhs[col]
            inv = 1.0 / m[col][col]
            for r in range(col + 1, d):
                f = m[r][col] * inv
                if f:
                    row, top = m[r], m[col]
                    for c in range(col, d):
                        row[c] -= f * top[c]
                    rhs[r] -= f * rhs[col]
        w = [0.0] * d
        for r in range(d - 1, -1, -1):
            if abs(m[r][r]) < 1e-12:
                continue
            s = rhs[r] - sum(m[r][c] * w[c] for c in range(r + 1, d))
            w[r] = s / m[r][r]
        return tuple(w)


def _dot(w: Sequence[float], x: Sequence[float]) -> float:
    return sum(a * b for a, b in zip(w, x, strict=True))


@dataclass(frozen=True, slots=True)
class Weights:
    """One published solution: global and per-endpoint weights of both targets (immutable)."""

    ttft: tuple[float, ...] | None = None
    tpot: tuple[float, ...] | None = None
    endpoint_ttft: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    endpoint_tpot: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    samples: int = 0
    tpot_samples: int = 0


class _EndpointStats:
    __slots__ = ("tpot", "ttft")

    def __init__(self) -> None:
        self.ttft = RidgeStats(len(TTFT_FEATURES))
        self.tpot = RidgeStats(len(TPOT_FEATURES))


class LatencyModel:
    """Online TTFT/TPOT predictor. ``observe`` and ``predict`` are safe from any thread; ``refit`` is
    run by one trainer at a time (a lock serialises concurrent calls)."""

    def __init__(self, prior_throughput: float | None = None) -> None:
        """``prior_throughput``: the cold-start prior's configured prefill rate (tokens/s; None: no
        prior, so no predictions before :data:`MIN_SAMPLES`), see :mod:`scheduler.plugins.latency.prior`."""
        self._prior = None if prior_throughput is None else PrefillPrior(prior_throughput, ENDPOINT_LIMIT)
        self._buffer: deque[tuple[str, Features, float | None, float | None]] = deque(maxlen=BUFFER_LIMIT)
        self._global_ttft = RidgeStats(len(TTFT_FEATURES))
        self._global_tpot = RidgeStats(len(TPOT_FEATURES))
        self._endpoints: OrderedDict[str, _EndpointStats] = OrderedDict()
        self._dirty: set[str] = set()
        self._weights = Weights()
        self._lock = threading.Lock()
        self.dropped = 0
        self.refits = 0
        self._errors: deque[float] = deque(maxlen=256)

    # -- request path -------------------------------------------------------------------------------

    def observe(
        self, endpoint: str, features: Features, ttft_ms: float | None, tpot_ms: float | None
    ) -> None:
        """Queue one completed request's observation (either target may be None: not observed) for the
        next refit (O(1), never blocks). A TTFT sample's error is measured here, against the prediction
        as it stands before the sample is learnt, and the cold-start prior learns from it at once."""
        if ttft_ms is not None:
            self._record_error(endpoint, features, ttft_ms)
            if self._prior is not None:
                self._prior.add(endpoint, features, ttft_ms)
        if len(self._buffer) == BUFFER_LIMIT:
            self.dropped += 1
        self._buffer.append((endpoint, features, ttft_ms, tpot_ms))

    @property
    def ready(self) -> bool:
        """Whether the learnt model predicts TTFT (cold start: fewer than :data:`MIN_SAMPLES` samples)."""
        return self._weights.ttft is not None

    @property
    def predicts(self) -> bool:
        """Whether :meth:`predict` answers: the learnt model is ready or the cold-start prior is on."""
        return self._weights.ttft is not None or self._prior is not None

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def predict(self, endpoint: str, features: Features) -> tuple[float, float] | None:
        """Predicted ``(ttft_ms, tpot_ms)`` on ``endpoint``: None before the model is ready, unless the
        cold-start prior is on (its TTFT, blended out as the model warms: see
        :func:`~scheduler.plugins.latency.prior.learnt_share`); TPOT is 0 until TPOT samples exist.
        Predictions are floored at 0."""
        w, prior = self._weights, self._prior
        if w.ttft is None:
            return None if prior is None else (prior.ttft(endpoint, features), 0.0)
        ttft_w = w.endpoint_ttft.get(endpoint, w.ttft)
        ttft = max(0.0, _dot(ttft_w, features.ttft_vector()))
        if prior is not None and (share := learnt_share(w.samples)) < 1.0:
            ttft = share * ttft + (1.0 - share) * prior.ttft(endpoint, features)
        tpot = 0.0
        if w.tpot is not None:
            tpot = max(0.0, _dot(w.endpoint_tpot.get(endpoint, w.tpot), features.tpot_vector()))
        return ttft, tpot

    # -- training -----------------------------------------------------------------------------------

    def refit(self) -> int:
        """Fold the buffered samples in and publish new weights; returns the samples folded."""
        with self._lock:
            buffer = self._buffer
            batch = [buffer.popleft() for _ in range(len(buffer))]
            self._decay(batch)
            count = 0
            for endpoint, features, ttft, tpot in batch:
                stats = self._endpoints.get(endpoint)
                if stats is None:
                    stats = self._endpoints[endpoint] = _EndpointStats()
                    if len(self._endpoints) > ENDPOINT_LIMIT:
                        evicted, _ = self._endpoints.popitem(last=False)
                        self._dirty.add(evicted)
                else:
                    self._endpoints.move_to_end(endpoint)
                self._dirty.add(endpoint)
                if ttft is not None:
                    x, w = features.ttft_vector(), relative_weight(ttft)
                    self._global_ttft.add(x, ttft, w)
                    stats.ttft.add(x, ttft, w)
                if tpot is not None:
                    xt, w = features.tpot_vector(), relative_weight(tpot)
                    self._global_tpot.add(xt, tpot, w)
                    stats.tpot.add(xt, tpot, w)
                count += 1
            if count:
                self._publish()
                self.refits += 1
            return count

    def _decay(self, batch: Sequence[tuple[str, Features, float | None, float | None]]) -> None:
        ttft_counts: dict[str, int] = {}
        tpot_counts: dict[str, int] = {}
        for endpoint, _, ttft, tpot in batch:
            if ttft is not None:
                ttft_counts[endpoint] = ttft_counts.get(endpoint, 0) + 1
            if tpot is not None:
                tpot_counts[endpoint] = tpot_counts.get(endpoint, 0) + 1
        self._global_ttft.decay(sum(ttft_counts.values()))
        self._global_tpot.decay(sum(tpot_counts.values()))
        for endpoint, n in ttft_counts.items():
            if (stats := self._endpoints.get(endpoint)) is not None:
                stats.ttft.decay(n)
        for endpoint, n in tpot_counts.items():
            if (stats := self._endpoints.get(endpoint)) is not None:
                stats.tpot.decay(n)

    def forget_endpoints(self, addresses: frozenset[str]) -> None:
        """Drop the models of endpoints that left the pool (published on the next refit)."""
        with self._lock:
            for address in addresses:
                self._endpoints.pop(address, None)
                self._dirty.add(address)
                if self._prior is not None:
                    self._prior.forget(address)

    def _record_error(self, endpoint: str, features: Features, ttft: float) -> None:
        predicted = self.predict(endpoint, features)
        if predicted is not None and ttft > 0:
            self._errors.append(abs(predicted[0] - ttft) / ttft)

    def _publish(self) -> None:
        g_ttft, g_tpot = self._global_ttft, self._global_tpot
        if g_ttft.n < MIN_SAMPLES:
            self._dirty.clear()  # the first publication solves every endpoint
            return
        ttft = g_ttft.solve(RIDGE)
        tpot = g_tpot.solve(RIDGE) if g_tpot.n >= MIN_SAMPLES else None
        old = self._weights
        first = old.ttft is None or (tpot is not None and old.tpot is None)
        ep_ttft = {} if first else dict(old.endpoint_ttft)
        ep_tpot = {} if first else dict(old.endpoint_tpot)
        # Only endpoints with new samples are re-solved (against the new global weights): a refit costs
        # O(d^3) per endpoint that trained, not per endpoint in the pool.
        for address in self._endpoints if first else self._dirty:
            stats = self._endpoints.get(address)
            if stats is None:
                ep_ttft.pop(address, None)
                ep_tpot.pop(address, None)
                continue
            if stats.ttft.n >= MIN_ENDPOINT_SAMPLES:
                ep_ttft[address] = stats.ttft.solve(RIDGE, ttft)
            if tpot is not None and stats.tpot.n >= MIN_ENDPOINT_SAMPLES:
                ep_tpot[address] = stats.tpot.solve(RIDGE, tpot)
        self._dirty.clear()
        self._weights = Weights(ttft, tpot, ep_ttft, ep_tpot, g_ttft.n, g_tpot.n)

    # -- introspection ------------------------------------------------------------------------------

    def median_ape(self) -> float | None:
        """Median absolute percentage error of TTFT over the last 256 samples, predicted before they
        were learnt (None before any prediction)."""
        errors = sorted(self._errors)
        return errors[len(errors) // 2] if errors else None

    def state(self) -> dict[str, Any]:
        """JSON-ready model state for ``/debug/plugins/state``."""
        w = self._weights
        mape = self.median_ape()
        return {
            "ready": w.ttft is not None,
            "samples": w.samples,
            "tpotSamples": w.tpot_samples,
            "pendingSamples": len(self._buffer),
            "droppedSamples": self.dropped,
            "refits": self.refits,
            "ttftMedianAbsPctError": None if mape is None else round(mape, 4),
            "ttftErrorSamples": len(self._errors),
            "ttftFeatures": list(TTFT_FEATURES),
            "tpotFeatures": list(TPOT_FEATURES),
            "ttftWeights": None if w.ttft is None else [round(v, 4) for v in w.ttft],
            "tpotWeights": None if w.tpot is None else [round(v, 4) for v in w.tpot],
            "endpointModels": len(w.endpoint_ttft),
            "coldStartPrior": None
            if self._prior is None
            else {
                "learntShare": round(learnt_share(w.samples), 3) if w.ttft is not None else 0.0,
                **self._prior.state(),
            },
        }


REFIT_INTERVAL = 0.2
"""Seconds the trainer waits after a refit before the next one, so completions are folded in batches
(the solve is paid at most five times a second, not per completion)."""


def train_loop(model_ref: weakref.ref[LatencyModel], wake: threading.Event) -> None:
    """Refit when woken (or every second), at most every :data:`REFIT_INTERVAL`; ends once the model
    is gone."""
    while True:
        wake.wait(1.0)
        wake.clear()
        model = model_ref()
        if model is None:
            return
        model.refit()
        del model
        time.sleep(REFIT_INTERVAL)
