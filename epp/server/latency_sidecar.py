"""Sidecar mode of ``predicted-latency-producer``: upstream's latency predictor servers as its source.

GIE's chart (``inferenceExtension.latencyPredictor.enabled``) runs a training server and N prediction
servers next to the picker and gives the picker their URLs in the environment; the Go EPP's
``latencypredictorasync`` client (GIE ``sidecars/latencypredictorasync/types.go`` at commit
1748e829d1161147aaf35e76699ec86fd88406d2, the last with the EPP; now llm-d-router
``pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/latencypredictorclient``)
reads them. This module is that client for pyepp. It is on when ``PREDICTION_SERVER_URL`` or
``TRAINING_SERVER_URL`` is set and the configuration has a ``predicted-latency-producer``:

* ``PREDICTION_SERVER_URL``: comma-separated prediction server base URLs (chosen round-robin per
  request; upstream picks one at random). Per request, in the async pre-scheduling step (scheduler
  plugins do no I/O; :mod:`epp.server.render` runs the same way), ONE ``POST {url}/predict/bulk/strict``
  with ``{"requests": [row, ...]}``, one row per endpoint of the pool, each with upstream's features
  (``kv_cache_percentage``, ``input_token_length``, ``num_request_waiting``, ``num_request_running``,
  ``num_tokens_generated`` 0, ``prefix_cache_score``, ``pod_type``, ``prefill_tokens_in_flight``,
  ``decode_tokens_in_flight`` 0); the answer's ``predictions[i]`` (``ttft_ms``, ``tpot_ms``) is
  handed to the producer (:meth:`~scheduler.plugins.latency.producer.PredictedLatencyProducer.
  accept_remote`), whose predictions then come from it;
* ``TRAINING_SERVER_URL``: the training server's base URL. Every sample the producer trains its own
  model on is also queued (bounded: :data:`~scheduler.plugins.latency.sidecar_mode.SIDECAR_QUEUE_LIMIT`,
  the oldest dropped and counted beyond) and a background task posts them every
  ``LATENCY_FLUSH_INTERVAL_SEC`` (1) as ``POST {url}/add_training_data_bulk`` with ``{"entries": [...]}``
  (the row's fields plus ``actual_ttft_ms``, ``actual_tpot_ms`` (0: not that kind of sample) and an
  RFC 3339 ``timestamp``), at most ``LATENCY_MAX_SAMPLE_SIZE`` (1000) entries per post (the rest wait
  for the next one; upstream samples the buffer down to that size and discards the rest). The server
  answers 202;
* ``LATENCY_HTTP_TIMEOUT_SEC`` (10, upstream's): the training posts' timeout. **Ours**:
  ``LATENCY_PREDICTION_TIMEOUT_MS`` (250): the prediction call's timeout, waiting for a connection
  included (upstream uses its 10 s HTTP timeout there too, too long to hold a request);
  ``LATENCY_MAX_BULK_SIZE`` (upstream's, 100, at most 100): a pool with more endpoints than that is
  predicted in process (upstream refuses such a bulk call too);
  ``LATENCY_MAX_CONCURRENT_DISPATCHES`` (upstream's, 36): prediction calls in flight at once (a request
  that finds none free waits within its timeout). Upstream's ``LATENCY_COALESCE_WINDOW_MS``,
  ``LATENCY_MAX_COALESCED_ROWS``, ``LATENCY_USE_NATIVE_XGBOOST`` and ``LATENCY_METRICS_INTERVAL_SEC``
  tune its coalescer and model cache, which this client does not have: they are read, checked and
  ignored. A value that is not a number in range fails the start with a message naming it (upstream
  silently keeps its default).

Failure of a prediction call (connection error, timeout, status other than 200, an answer that is not
``predictions`` with one ``ttft_ms``/``tpot_ms`` number pair per row, or over
:data:`MAX_RESPONSE_BYTES`): the request is scheduled with the in-process model (which keeps learning
from every request, cold-start prior included), and a warning is logged at most once per
:data:`WARN_INTERVAL_S` per kind (prediction, training) with the number of failures since the last
one. A failed training post drops its entries (counted). Nothing here raises into a stream.

State: counters (calls, failures by reason, rows, samples sent / dropped, last error) in the
producer's entry of ``/debug/plugins/state`` under ``sidecar``, and as the ``pyepp_latency_sidecar_*``
Prometheus families (:mod:`epp.server.latency_sidecar_metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import structlog

from scheduler.plugins.latency.model import Features
from scheduler.plugins.latency.producer import PredictedLatencyProducer, SidecarSample
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "ENV_VARS",
    "FAILURE_REASONS",
    "PREDICT_PATH",
    "TRAIN_PATH",
    "LatencySidecarClient",
    "SidecarConfig",
    "SidecarConfigError",
    "latency_sidecar",
    "sidecar_config_from_env",
]

PREDICT_PATH = "/predict/bulk/strict"
TRAIN_PATH = "/add_training_data_bulk"
MAX_RESPONSE_BYTES = 4 * 1024 * 1024  # 100 predictions are ~25 KB
WARN_INTERVAL_S = 30.0
CLOSE_FLUSH_TIMEOUT_S = 2.0  # the last flush's bound per post, at shutdown
# why a call failed: no connection, no answer in time, a status other than 2xx, an answer that is not
# the protocol's, an error of ours (prediction rows that could not be built)
FAILURE_REASONS = ("connection", "timeout", "status", "malformed", "internal")
ENV_VARS = (
    "PREDICTION_SERVER_URL",
    "TRAINING_SERVER_URL",
    "LATENCY_MAX_SAMPLE_SIZE",
    "LATENCY_FLUSH_INTERVAL_SEC",
    "LATENCY_HTTP_TIMEOUT_SEC",
    "LATENCY_PREDICTION_TIMEOUT_MS",
    "LATENCY_MAX_BULK_SIZE",
    "LATENCY_MAX_CONCURRENT_DISPATCHES",
)
_IGNORED_INT_VARS = (
    "LATENCY_COALESCE_WINDOW_MS",
    "LATENCY_MAX_COALESCED_ROWS",
    "LATENCY_METRICS_INTERVAL_SEC",
)
_log = structlog.get_logger("epp.latency_sidecar")
_NO_TIMEOUT = aiohttp.ClientTimeout(total=None)  # each call is bounded by its own asyncio.timeout


class SidecarConfigError(ValueError):
    """A sidecar environment variable is invalid (the message names it)."""


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    prediction_urls: tuple[str, ...] = ()  # empty: predictions in process only
    training_url: str = ""  # empty: no training posts
    prediction_timeout_s: float = 0.25
    http_timeout_s: float = 10.0
    flush_interval_s: float = 1.0
    max_sample_size: int = 1000
    max_bulk_size: int = 100
    max_concurrent: int = 36


def _int_env(env: Mapping[str, str], name: str, default: int, low: int, high: int | None = None) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise SidecarConfigError(f"{name}={raw!r}: expected an integer {bound}")
    return value


def _url(name: str, raw: str) -> str:
    url = raw.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SidecarConfigError(f"{name}: {raw.strip()!r} is not an http:// or https:// URL")
    return url


def sidecar_config_from_env(env: Mapping[str, str]) -> SidecarConfig | None:
    """The sidecar configuration from upstream's environment variables (None: neither URL is set)."""
    predict_raw, train_raw = env.get("PREDICTION_SERVER_URL", ""), env.get("TRAINING_SERVER_URL", "")
    if not predict_raw.strip() and not train_raw.strip():
        return None
    urls = tuple(_url("PREDICTION_SERVER_URL", u) for u in predict_raw.split(",") if u.strip())
    if predict_raw.strip() and not urls:
        raise SidecarConfigError(f"PREDICTION_SERVER_URL={predict_raw!r}: no URL")
    for name in _IGNORED_INT_VARS:
        _int_env(env, name, 0, 0)
    native = env.get("LATENCY_USE_NATIVE_XGBOOST", "").strip().lower()
    if native not in ("", "true", "false"):
        raise SidecarConfigError(f"LATENCY_USE_NATIVE_XGBOOST={native!r}: expected true or false")
    return SidecarConfig(
        prediction_urls=urls,
        training_url=_url("TRAINING_SERVER_URL", train_raw) if train_raw.strip() else "",
        prediction_timeout_s=_int_env(env, "LATENCY_PREDICTION_TIMEOUT_MS", 250, 1, 60_000) / 1000.0,
        http_timeout_s=float(_int_env(env, "LATENCY_HTTP_TIMEOUT_SEC", 10, 1, 3600)),
        flush_interval_s=float(_int_env(env, "LATENCY_FLUSH_INTERVAL_SEC", 1, 1, 3600)),
        max_sample_size=_int_env(env, "LATENCY_MAX_SAMPLE_SIZE", 1000, 1, 1_000_000),
        max_bulk_size=_int_env(env, "LATENCY_MAX_BULK_SIZE", 100, 1, 100),
        max_concurrent=_int_env(env, "LATENCY_MAX_CONCURRENT_DISPATCHES", 36, 1, 4096),
    )


def latency_sidecar(
    plugins: Sequence[object],
    snapshot: Callable[[], Sequence[EndpointView]],
    env: Mapping[str, str],
) -> LatencySidecarClient | None:
    """The sidecar client when the environment names a sidecar and ``plugins`` has a
    ``predicted-latency-producer`` (None otherwise). Raises :class:`SidecarConfigError`."""
    config = sidecar_config_from_env(env)
    if config is None:
        return None
    producers = [p for p in plugins if isinstance(p, PredictedLatencyProducer)]
    if not producers:
        _log.warning(
            "PREDICTION_SERVER_URL / TRAINING_SERVER_URL are set but the configuration has no "
            "predicted-latency-producer: the latency predictor sidecars are not used"
        )
        return None
    return LatencySidecarClient(producers, snapshot, config)


class _Failure(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _row(features: Features, pod_type: str) -> dict[str, Any]:
    prompt = features.input_tokens
    cached = prompt - features.uncached_tokens
    return {
        "kv_cache_percentage": min(1.0, max(0.0, features.kv_usage)),
        "input_token_length": prompt,
        "num_request_waiting": features.waiting,
        "num_request_running": features.running,
        "num_tokens_generated": 0,
        "prefix_cache_score": min(1.0, max(0.0, cached / prompt)) if prompt > 0 else 0.0,
        "pod_type": pod_type,
        "prefill_tokens_in_flight": features.prefill_tokens_in_flight,
        "decode_tokens_in_flight": 0,
    }


def _entry(sample: SidecarSample) -> dict[str, Any]:
    entry = _row(sample.features, sample.pod_type)
    entry["num_tokens_generated"] = sample.tokens_generated
    entry["actual_ttft_ms"] = sample.ttft_ms
    entry["actual_tpot_ms"] = sample.tpot_ms
    entry["timestamp"] = datetime.fromtimestamp(sample.at, UTC).isoformat()
    return entry


def _predictions(answer: Any, rows: int) -> list[tuple[float, float]]:
    """``(ttft_ms, tpot_ms)`` per row from a ``/predict/bulk/strict`` answer; raises _Failure."""
    preds = answer.get("predictions") if isinstance(answer, dict) else None
    if not isinstance(preds, list) or len(preds) != rows:
        got = f"{len(preds)} predictions" if isinstance(preds, list) else "no predictions list"
        raise _Failure("malformed", f"expected {rows} predictions, got {got}")
    out: list[tuple[float, float]] = []
    for i, p in enumerate(preds):
        ttft = p.get("ttft_ms") if isinstance(p, dict) else None
        tpot = p.get("tpot_ms") if isinstance(p, dict) else None
        ok = all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            for v in (ttft, tpot)
        )
        if not ok:
            raise _Failure("malformed", f"predictions[{i}]: ttft_ms/tpot_ms are not non-negative numbers")
        out.append((float(ttft), float(tpot)))  # type: ignore[arg-type]
    return out


class _Warner:
    """A warning at most once per WARN_INTERVAL_S, saying how many failures it stands for."""

    def __init__(self, what: str, clock: Callable[[], float]) -> None:
        self._what, self._clock = what, clock
        self._last = -math.inf
        self._since = 0

    def failed(self, reason: str, detail: str) -> None:
        self._since += 1
        now = self._clock()
        if now - self._last >= WARN_INTERVAL_S:
            outcome = "predicting in process" if self._what == "prediction" else "samples dropped"
            _log.warning(
                f"latency predictor {self._what} failed; {outcome}",
                reason=reason,
                error=detail,
                failures_since_last_warning=self._since,
            )
            self._last, self._since = now, 0


class LatencySidecarClient:
    """The pre-scheduling step that fetches the predictions, and the training poster (a task)."""

    def __init__(
        self,
        producers: Sequence[PredictedLatencyProducer],
        snapshot: Callable[[], Sequence[EndpointView]],
        config: SidecarConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._producers = tuple(producers)
        self._snapshot = snapshot
        self._slots = asyncio.Semaphore(config.max_concurrent)
        self._session: aiohttp.ClientSession | None = None
        self._next = 0
        self._flusher: asyncio.Task[None] | None = None
        self._predict_warn = _Warner("prediction", clock)
        self._train_warn = _Warner("training", clock)
        self.counters: dict[str, Any] = {
            "predictionCalls": 0,
            "predictionFailures": {},
            "predictedRows": 0,
            "skippedOversizedPool": 0,
            "trainingPosts": 0,
            "trainingFailures": {},
            "trainingSamplesSent": 0,
            "trainingSamplesLost": 0,
            "lastError": "",
        }
        for producer in self._producers:
            producer.enable_sidecar(bool(config.training_url), self.state)

    def state(self) -> dict[str, Any]:
        c = self.counters
        return {
            "predictionServers": list(self.config.prediction_urls),
            "trainingServer": self.config.training_url,
            **c,
            "predictionFailures": dict(c["predictionFailures"]),
            "trainingFailures": dict(c["trainingFailures"]),
        }

    def _client(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            limit = self.config.max_concurrent + 2
            session = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit),
                trust_env=False,
                timeout=_NO_TIMEOUT,
            )
        return session

    def start(self) -> None:
        """Start the training task (on the serving loop; without a training server, nothing)."""
        if self._flusher is None and self.config.training_url:
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush_loop(), name="epp-latency-training-flush"
            )

    def wants(self, request: LLMRequest) -> bool:
        """Every scheduled request waits for the step when there are prediction servers."""
        return bool(self.config.prediction_urls)

    async def render(self, request: LLMRequest, body: bytes) -> None:
        """Fetch the predictions of ``request`` on every endpoint and hand them to the producers (None
        on failure). Never raises; never waits longer than the prediction timeout."""
        if not self.config.prediction_urls:
            return
        endpoints = self._snapshot()
        if not endpoints:
            return
        if len(endpoints) > self.config.max_bulk_size:
            self.counters["skippedOversizedPool"] += 1
            return
        for producer in self._producers:
            if not producer.params.predict_in_produce:
                continue
            start = time.perf_counter()
            try:
                rows = [
                    _row(f, producer.pod_type(e)) for e, f in producer.remote_features(request, endpoints)
                ]
                predicted = await self._predict(rows)
            except _Failure as exc:
                self._failed("predictionFailures", exc, self._predict_warn)
                producer.accept_remote(request.request_id, None)
                continue
            except Exception as exc:  # never into the stream: the request is scheduled in process
                _log.exception("latency predictor prediction step failed", request_id=request.request_id)
                self._failed("predictionFailures", _Failure("internal", repr(exc)), self._predict_warn)
                producer.accept_remote(request.request_id, None)
                continue
            self.counters["predictedRows"] += len(rows)
            producer.accept_remote(
                request.request_id,
                {e.address: p for e, p in zip(endpoints, predicted, strict=True)},
                time.perf_counter() - start,
            )

    def _failed(self, kind: str, exc: _Failure, warner: _Warner) -> None:
        counts = self.counters[kind]
        counts[exc.reason] = counts.get(exc.reason, 0) + 1
        self.counters["lastError"] = f"{exc.reason}: {exc}"
        warner.failed(exc.reason, str(exc))

    async def _predict(self, rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
        urls = self.config.prediction_urls
        url = urls[self._next % len(urls)] + PREDICT_PATH
        self._next += 1
        self.counters["predictionCalls"] += 1
        timeout = self.config.prediction_timeout_s
        try:
            async with asyncio.timeout(timeout):
                async with self._slots:
                    status, answer = await self._post(url, orjson.dumps({"requests": rows}))
        except TimeoutError:
            raise _Failure("timeout", f"POST {url}: no answer within {timeout:g}s") from None
        if status != 200:
            raise _Failure("status", f"POST {url}: HTTP {status}")
        try:
            parsed = orjson.loads(answer)
        except orjson.JSONDecodeError:
            raise _Failure("malformed", f"POST {url}: the answer is not JSON") from None
        return _predictions(parsed, len(rows))

    async def _post(self, url: str, data: bytes) -> tuple[int, bytes]:
        try:
            async with self._client().post(
                url, data=data, headers={"content-type": "application/json"}
            ) as resp:
                body = await resp.content.read(MAX_RESPONSE_BYTES + 1)
                if len(body) > MAX_RESPONSE_BYTES:
                    raise _Failure("malformed", f"POST {url}: answer over {MAX_RESPONSE_BYTES} bytes")
                return resp.status, body
        except (aiohttp.ClientError, OSError) as exc:
            raise _Failure("connection", f"POST {url}: {type(exc).__name__}: {exc}") from None

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_s)
            try:
                await self.flush()
            except Exception:  # the task outlives any one flush
                _log.exception("latency predictor training flush failed")

    async def flush(self, timeout_s: float | None = None) -> int:
        """Post the queued training samples (at most ``max_sample_size`` per producer), each post
        bounded by ``timeout_s`` (default ``LATENCY_HTTP_TIMEOUT_SEC``); the number sent. Never raises."""
        timeout = self.config.http_timeout_s if timeout_s is None else timeout_s
        sent = 0
        url = self.config.training_url + TRAIN_PATH
        for producer in self._producers:
            samples = producer.drain_samples(self.config.max_sample_size)
            if not samples:
                continue
            self.counters["trainingPosts"] += 1
            data = orjson.dumps({"entries": [_entry(s) for s in samples]})
            try:
                async with asyncio.timeout(timeout):
                    status, _ = await self._post(url, data)
                if not 200 <= status < 300:  # upstream's server answers 202
                    raise _Failure("status", f"POST {url}: HTTP {status}")
            except TimeoutError:
                exc = _Failure("timeout", f"POST {url}: no answer within {timeout:g}s")
                self._failed("trainingFailures", exc, self._train_warn)
                self.counters["trainingSamplesLost"] += len(samples)
                continue
            except _Failure as exc:
                self._failed("trainingFailures", exc, self._train_warn)
                self.counters["trainingSamplesLost"] += len(samples)
                continue
            self.counters["trainingSamplesSent"] += len(samples)
            sent += len(samples)
        return sent

    async def aclose(self) -> None:
        """Stop the training task (one last flush, each post bounded by :data:`CLOSE_FLUSH_TIMEOUT_S`
        so that a silent training server cannot hold the shutdown) and close the session."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        if self.config.training_url:
            await self.flush(min(CLOSE_FLUSH_TIMEOUT_S, self.config.http_timeout_s))
        if self._session is not None:
            await self._session.close()
            self._session = None
