"""``predicted-latency-producer``'s sidecar client (epp.server.latency_sidecar) against an aiohttp server
on 127.0.0.1 that answers as upstream's prediction and training servers (GIE commit 1748e829,
``latencypredictor/prediction_server.py`` ``/predict/bulk/strict``, ``training_server.py``
``/add_training_data_bulk``): the environment, the wire format, one bulk call per request,
round-robin, the bounds and every failure falling back to the in-process model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from epp.server import latency_sidecar as ls
from epp.server.latency_sidecar import (
    LatencySidecarClient,
    SidecarConfig,
    SidecarConfigError,
    latency_sidecar,
    sidecar_config_from_env,
)
from epp.server.latency_sidecar_metrics import LatencySidecarCollector
from epp.server.prescheduling import StepChain, chain
from scheduler.cycle_state import CycleState
from scheduler.plugins.latency import sidecar_mode
from scheduler.plugins.latency.producer import PredictedLatencyParams, PredictedLatencyProducer
from scheduler.types import (
    Completion,
    Endpoint,
    LLMRequest,
    Metrics,
    Outcome,
    ProfileResult,
    SchedulingResult,
    ScoredEndpoint,
    Usage,
)

A = Endpoint("10.0.0.1:8000", metrics=Metrics(waiting_queue_size=2, kv_cache_usage=0.25))
B = Endpoint("10.0.0.2:8000", labels={"role": "decode"})
C = Endpoint("10.0.0.3:8000", labels={"role": "prefill"})


def request(i: int = 0, **headers: str) -> LLMRequest:
    return LLMRequest(f"r{i}", "m", "m", token_estimate=1000, headers=headers)


def routed(target: Endpoint) -> SchedulingResult:
    return SchedulingResult(
        "default", (target,), {"default": ProfileResult("default", (ScoredEndpoint(target, 1.0),))}
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def producer(**params: Any) -> PredictedLatencyProducer:
    return PredictedLatencyProducer(
        "predicted-latency-producer", Clock(), PredictedLatencyParams(**params), background=False
    )


class Sidecar:
    """Upstream's two servers in one app; records what it received. ``answer`` overrides the
    prediction answer (bytes sent as is); ``status`` / ``delay`` apply to both paths."""

    def __init__(self, name: str = "a") -> None:
        self.name = name
        self.predict_bodies: list[dict[str, Any]] = []
        self.train_bodies: list[dict[str, Any]] = []
        self.ttft = 7.0
        self.answer: bytes | None = None
        self.status = 0  # 0: the normal status (200 / 202)
        self.delay = 0.0
        self.url = ""
        self.in_flight = self.most_in_flight = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(ls.PREDICT_PATH, self.predict)
        app.router.add_post(ls.TRAIN_PATH, self.train)
        return app

    async def predict(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.predict_bodies.append(body)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        if self.status:
            return web.Response(status=self.status, text="failed")
        if self.answer is not None:
            return web.Response(body=self.answer, content_type="application/json")
        preds = [{"ttft_ms": self.ttft + i, "tpot_ms": 3.0 + i} for i in range(len(body["requests"]))]
        return web.json_response({"predictions": preds, "total_requests": len(preds)})

    async def train(self, request: web.Request) -> web.Response:
        self.train_bodies.append(orjson.loads(await request.read()))
        if self.delay:
            await asyncio.sleep(self.delay)
        return web.json_response({"message": "ok"}, status=self.status or 202)


async def serve(sidecar: Sidecar) -> web.AppRunner:
    runner = web.AppRunner(sidecar.app(), shutdown_timeout=0.1)  # a slow answer is not waited for
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    sidecar.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    return runner


@pytest.fixture
async def sidecars() -> AsyncIterator[tuple[Sidecar, Sidecar]]:
    a, b = Sidecar("a"), Sidecar("b")
    runners = [await serve(a), await serve(b)]
    try:
        yield a, b
    finally:
        for r in runners:
            await r.cleanup()


def client(
    p: PredictedLatencyProducer, endpoints: list[Endpoint], urls: list[str], training: str = "", **cfg: Any
) -> LatencySidecarClient:
    config = SidecarConfig(prediction_urls=tuple(urls), training_url=training, **cfg)
    return LatencySidecarClient([p], lambda: endpoints, config)


# -- environment ---------------------------------------------------------------------------------------


def test_config_from_upstreams_environment() -> None:
    assert sidecar_config_from_env({}) is None
    env = {
        "PREDICTION_SERVER_URL": "http://localhost:8001, http://localhost:8002/",
        "TRAINING_SERVER_URL": "http://localhost:8000",
        "LATENCY_MAX_SAMPLE_SIZE": "10000",
        "LATENCY_FLUSH_INTERVAL_SEC": "2",
        "LATENCY_HTTP_TIMEOUT_SEC": "3",
        "LATENCY_MAX_BULK_SIZE": "50",
        "LATENCY_MAX_CONCURRENT_DISPATCHES": "36",
        "LATENCY_COALESCE_WINDOW_MS": "1",  # upstream's coalescer: read, checked, unused
        "LATENCY_PREDICTION_TIMEOUT_MS": "80",
    }
    config = sidecar_config_from_env(env)
    assert config == SidecarConfig(
        prediction_urls=("http://localhost:8001", "http://localhost:8002"),
        training_url="http://localhost:8000",
        prediction_timeout_s=0.08,
        http_timeout_s=3.0,
        flush_interval_s=2.0,
        max_sample_size=10000,
        max_bulk_size=50,
        max_concurrent=36,
    )
    only_training = sidecar_config_from_env({"TRAINING_SERVER_URL": "http://t:8000"})
    assert only_training is not None and only_training.prediction_urls == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"PREDICTION_SERVER_URL": "localhost:8001"},
            "PREDICTION_SERVER_URL: 'localhost:8001' is not an http",
        ),
        ({"PREDICTION_SERVER_URL": " , "}, "PREDICTION_SERVER_URL=' , ': no URL"),
        ({"TRAINING_SERVER_URL": "ftp://x"}, "TRAINING_SERVER_URL: 'ftp://x'"),
        ({"TRAINING_SERVER_URL": "http://t", "LATENCY_MAX_BULK_SIZE": "101"}, "LATENCY_MAX_BULK_SIZE='101'"),
        (
            {"TRAINING_SERVER_URL": "http://t", "LATENCY_MAX_SAMPLE_SIZE": "lots"},
            "LATENCY_MAX_SAMPLE_SIZE='lots'",
        ),
        (
            {"TRAINING_SERVER_URL": "http://t", "LATENCY_HTTP_TIMEOUT_SEC": "0"},
            "LATENCY_HTTP_TIMEOUT_SEC='0'",
        ),
        (
            {"TRAINING_SERVER_URL": "http://t", "LATENCY_COALESCE_WINDOW_MS": "-1"},
            "LATENCY_COALESCE_WINDOW_MS",
        ),
        ({"TRAINING_SERVER_URL": "http://t", "LATENCY_USE_NATIVE_XGBOOST": "yes"}, "true or false"),
    ],
)
def test_bad_environment_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(SidecarConfigError, match=message.replace("(", r"\(")):
        sidecar_config_from_env(env)


def test_no_client_without_the_environment_or_a_producer() -> None:
    p = producer()
    env = {"PREDICTION_SERVER_URL": "http://localhost:8001"}
    assert latency_sidecar([p], lambda: [A], {}) is None
    with capture_logs() as logs:
        assert latency_sidecar([object()], lambda: [A], env) is None
    assert "no predicted-latency-producer" in logs[0]["event"]
    built = latency_sidecar([object(), p], lambda: [A], env)
    assert built is not None and built.wants(request())


def test_chain_runs_present_steps_in_order() -> None:
    p = producer()
    c = client(p, [A], ["http://x"])
    assert chain(None, None) is None and chain(None, c) is c
    both = chain(c, c)
    assert isinstance(both, StepChain) and both.steps == (c, c)


# -- predictions ---------------------------------------------------------------------------------------


async def test_one_bulk_call_per_request_with_upstreams_rows(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, b = sidecars
    p = producer(endpoint_role_label="role")
    c = client(p, [A, B, C], [a.url, b.url])
    try:
        await c.render(request(0), b"{}")
        await c.render(request(1), b"{}")
        await c.render(request(2), b"{}")
    finally:
        await c.aclose()
    assert len(a.predict_bodies) == 2 and len(b.predict_bodies) == 1  # round-robin: a, b, a
    rows = a.predict_bodies[0]["requests"]
    assert len(rows) == 3
    assert rows[0] == {
        "kv_cache_percentage": 0.25,
        "input_token_length": 1000,
        "num_request_waiting": 2,
        "num_request_running": 0,
        "num_tokens_generated": 0,
        "prefix_cache_score": 0.0,
        "pod_type": "",
        "prefill_tokens_in_flight": 0,
        "decode_tokens_in_flight": 0,
    }
    assert [r["pod_type"] for r in rows] == ["", "decode", "prefill"]
    # the producer's predictions now come from the sidecar (row order = endpoint order)
    found = p.predictions(CycleState(), request(0), [A, B, C])
    assert found is not None
    assert {k: (v.ttft, v.tpot) for k, v in found.items()} == {
        A.address: (7.0, 3.0),
        B.address: (8.0, 4.0),
        C.address: (9.0, 5.0),
    }
    assert c.counters["predictionCalls"] == 3 and c.counters["predictedRows"] == 9
    assert p.dump_state()["sidecar"]["cyclesWithSidecarPredictions"] == 1


async def test_sidecar_predictions_are_kept_until_dispatch(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, _ = sidecars
    p = producer(cold_start_prior=False)  # the in-process model predicts nothing (cold)
    c = client(p, [A], [a.url])
    try:
        await c.render(request(0), b"{}")
    finally:
        await c.aclose()
    assert p.predictions(CycleState(), request(0), [A]) is not None
    assert p.predictions(CycleState(), request(1), [A]) is None  # another request: cold model
    p.on_dispatched(request(0), routed(A))
    assert p.predictions(CycleState(), request(0), [A]) is None  # dropped at dispatch


class Durations:
    """The LatencyMetrics methods the producer calls (the prediction durations recorded)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def pd_decision(self, *args: Any) -> None: ...

    def disagg_decision(self, *args: Any) -> None: ...

    def watch_inflight_load(self, source: Any) -> None: ...

    def latency_observed(self, *args: Any) -> None: ...

    def latency_predicted(self, plugin_type: str, name: str, model: str, target: str, seconds: float) -> None:
        self.seconds.append(seconds)


async def test_the_prediction_duration_includes_the_sidecar_call(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, _ = sidecars
    a.delay = 0.05
    p = producer()
    durations = Durations()
    p.bind_metrics(durations)
    c = client(p, [A], [a.url])
    try:
        await c.render(request(0), b"{}")
    finally:
        await c.aclose()
    p.predictions(CycleState(), request(0), [A])
    p.predictions(CycleState(), request(1), [A])  # in process only: no fetch time
    assert len(durations.seconds) == 2
    assert durations.seconds[0] >= 0.05 > durations.seconds[1]  # upstream times its bulk call


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda s: setattr(s, "status", 500), "status"),
        (lambda s: setattr(s, "answer", b"not json"), "malformed"),
        (lambda s: setattr(s, "answer", b'{"predictions": []}'), "malformed"),
        (lambda s: setattr(s, "answer", b'{"predictions": [{"ttft_ms": "1", "tpot_ms": 2}]}'), "malformed"),
        (lambda s: setattr(s, "answer", b'{"predictions": [{"ttft_ms": -1, "tpot_ms": 2}]}'), "malformed"),
        (lambda s: setattr(s, "answer", b"[1, 2]"), "malformed"),
        (lambda s: setattr(s, "delay", 2.5), "timeout"),
    ],
)
async def test_failures_fall_back_to_the_in_process_model(
    sidecars: tuple[Sidecar, Sidecar], setup: Any, reason: str
) -> None:
    a, _ = sidecars
    setup(a)
    p = producer()  # the cold-start prior predicts in process
    c = client(p, [A], [a.url], prediction_timeout_s=0.1)
    start = time.perf_counter()
    try:
        with capture_logs() as logs:
            await c.render(request(0), b"{}")
        elapsed = time.perf_counter() - start
    finally:
        await c.aclose()
    assert elapsed < 1.5  # bounded by the prediction timeout (0.1 s), not the sidecar's 2.5 s
    assert c.counters["predictionFailures"] == {reason: 1}
    assert logs[0]["log_level"] == "warning" and logs[0]["reason"] == reason
    found = p.predictions(CycleState(), request(0), [A])
    assert found is not None and found[A.address].ttft != 7.0  # the prior's, not the sidecar's
    assert p.remote_cycles == 0


async def test_connection_refused_falls_back_and_warnings_are_rate_limited() -> None:
    p = producer()
    c = client(p, [A], ["http://127.0.0.1:9"])  # discard port: nothing listens
    try:
        with capture_logs() as logs:
            for i in range(5):
                await c.render(request(i), b"{}")
    finally:
        await c.aclose()
    assert c.counters["predictionFailures"] == {"connection": 5}
    assert len([e for e in logs if e["log_level"] == "warning"]) == 1  # one per WARN_INTERVAL_S
    assert c.state()["lastError"].startswith("connection: POST http://127.0.0.1:9/predict/bulk/strict")


async def test_an_oversized_pool_is_predicted_in_process(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, _ = sidecars
    p = producer()
    c = client(p, [A, B, C], [a.url], max_bulk_size=2)
    try:
        await c.render(request(), b"{}")
    finally:
        await c.aclose()
    assert a.predict_bodies == [] and c.counters["skippedOversizedPool"] == 1


async def test_concurrent_calls_are_bounded(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, _ = sidecars
    a.delay = 0.1
    p = producer()
    c = client(p, [A], [a.url], max_concurrent=2, prediction_timeout_s=5.0)
    try:
        await asyncio.gather(*(c.render(request(i), b"{}") for i in range(5)))
    finally:
        await c.aclose()
    assert c.counters["predictionFailures"] == {} and len(a.predict_bodies) == 5
    assert a.most_in_flight == 2  # LATENCY_MAX_CONCURRENT_DISPATCHES


# -- training ------------------------------------------------------------------------------------------


def complete(p: PredictedLatencyProducer, i: int, target: Endpoint, seconds: float, tokens: int) -> None:
    r = request(i)
    p.prepare(CycleState(), r, [target])
    p.on_dispatched(r, routed(target))
    clock = p._clock
    assert isinstance(clock, Clock)
    clock.now += seconds
    p.on_completed(r, routed(target), Completion(Outcome.OK, usage=Usage(completion_tokens=tokens)))


async def test_training_samples_are_posted_in_bulk(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, _ = sidecars
    p = producer(endpoint_role_label="role")
    c = client(p, [A, B], [], training=a.url, max_sample_size=2)
    assert not c.wants(request())  # no prediction server: requests do not wait
    for i in range(3):
        complete(p, i, B, 0.5, 8)
    assert p.queued_samples() == 3
    assert await c.flush() == 2  # at most max_sample_size per post, oldest first
    assert await c.flush() == 1
    assert await c.flush() == 0
    await c.aclose()
    assert [len(body["entries"]) for body in a.train_bodies] == [2, 1]
    entry = a.train_bodies[0]["entries"][0]
    assert entry["actual_ttft_ms"] == pytest.approx(500.0) and entry["actual_tpot_ms"] == 0.0
    assert entry["input_token_length"] == 1000 and entry["pod_type"] == "decode"
    assert entry["timestamp"].endswith("+00:00")
    assert set(entry) == {
        *ls._row(p.features(request(), A, None), "").keys(),
        "actual_ttft_ms",
        "actual_tpot_ms",
        "timestamp",
    }
    assert c.counters["trainingSamplesSent"] == 3 and c.counters["trainingPosts"] == 2


async def test_streamed_samples_carry_ttft_and_tpot_separately(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, _ = sidecars
    p = producer(streaming_mode=True)
    c = client(p, [A], [], training=a.url)
    r = request()
    p.on_dispatched(r, routed(A))
    clock = p._clock
    assert isinstance(clock, Clock)
    clock.now += 0.2
    p.on_response_headers(r, routed(A), 200, {})
    p.on_response_chunk(r, routed(A), b"x")
    clock.now += 0.9
    p.on_completed(r, routed(A), Completion(Outcome.OK, usage=Usage(completion_tokens=10)))
    await c.flush()
    await c.aclose()
    ttft, tpot = a.train_bodies[0]["entries"]
    assert ttft["actual_ttft_ms"] == pytest.approx(200.0) and ttft["actual_tpot_ms"] == 0.0
    assert tpot["actual_ttft_ms"] == 0.0 and tpot["actual_tpot_ms"] == pytest.approx(100.0)
    assert tpot["num_tokens_generated"] == 10 and ttft["num_tokens_generated"] == 0


async def test_failed_training_posts_count_the_lost_samples(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, _ = sidecars
    a.status = 500
    p = producer()
    c = client(p, [A], [], training=a.url)
    complete(p, 0, A, 0.1, 2)
    with capture_logs() as logs:
        assert await c.flush() == 0
    await c.aclose()
    assert c.counters["trainingFailures"] == {"status": 1} and c.counters["trainingSamplesLost"] == 1
    assert "samples dropped" in logs[0]["event"]


async def test_the_counters_are_prometheus_families(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, b = sidecars
    a.status = 500
    b.answer = b"not json"
    p = producer()
    c = client(p, [A], [a.url, b.url], training=a.url)
    registry = CollectorRegistry()
    registry.register(LatencySidecarCollector(c))
    for i in range(3):  # the calls alternate between the two servers: status, malformed, status
        await c.render(request(i), b"{}")
    complete(p, 9, A, 0.1, 2)
    await c.flush()
    await c.aclose()

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value("pyepp_latency_sidecar_" + name, labels)

    assert value("prediction_calls_total") == 3
    assert value("prediction_failures_total", reason="status") == 2
    assert value("prediction_failures_total", reason="malformed") == 1
    assert value("prediction_failures_total", reason="timeout") == 0  # every reason, from the start
    assert value("predicted_rows_total") == 0
    assert value("predictions_skipped_total", reason="oversized_pool") == 0
    assert value("training_posts_total") == 1
    assert value("training_failures_total", reason="status") == 1
    assert value("training_samples_total", outcome="lost") == 1
    assert value("training_samples_total", outcome="sent") == 0


async def test_the_training_queue_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sidecar_mode, "SIDECAR_QUEUE_LIMIT", 3)
    p = producer()
    c = client(p, [A], [], training="http://127.0.0.1:9")
    for i in range(5):
        complete(p, i, A, 0.1 * (i + 1), 2)
    assert p.queued_samples() == 3 and p.samples_dropped == 2
    assert [s.ttft_ms for s in p.drain_samples(10)] == pytest.approx([300.0, 400.0, 500.0])  # the newest kept
    assert p.dump_state()["sidecar"]["trainingSamplesDropped"] == 2
    await c.aclose()


async def test_the_background_task_flushes_and_close_stops_it(sidecars: tuple[Sidecar, Sidecar]) -> None:
    a, _ = sidecars
    p = producer()
    c = client(p, [A], [], training=a.url, flush_interval_s=0.05)
    c.start()
    complete(p, 0, A, 0.1, 2)
    for _ in range(100):
        if a.train_bodies:
            break
        await asyncio.sleep(0.02)
    assert len(a.train_bodies) == 1
    complete(p, 1, A, 0.1, 2)
    await c.aclose()  # one last flush
    assert len(a.train_bodies) == 2 and c._flusher is None


async def test_close_does_not_wait_for_a_silent_training_server(
    sidecars: tuple[Sidecar, Sidecar], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = sidecars
    a.delay = 2.5
    monkeypatch.setattr(ls, "CLOSE_FLUSH_TIMEOUT_S", 0.1)
    p = producer()
    c = client(p, [A], [], training=a.url)
    complete(p, 0, A, 0.1, 2)
    start = time.perf_counter()
    await c.aclose()
    assert time.perf_counter() - start < 1.5  # the 0.1 s flush timeout, not the server's 2.5 s
    assert c.counters["trainingFailures"] == {"timeout": 1} and c.counters["trainingSamplesLost"] == 1


async def test_an_unexpected_error_is_counted_not_raised(
    sidecars: tuple[Sidecar, Sidecar], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = sidecars
    p = producer()
    c = client(p, [A], [a.url])

    def broken(*_: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(p, "remote_features", broken)
    try:
        with capture_logs():
            await c.render(request(), b"{}")
    finally:
        await c.aclose()
    assert c.counters["predictionFailures"] == {"internal": 1} and a.predict_bodies == []
    assert p.predictions(CycleState(), request(), [A]) is not None  # the in-process model answers
