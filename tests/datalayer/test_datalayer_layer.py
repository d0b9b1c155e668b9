"""DataLayer with static discovery and a fake HTTP client: health, staleness, snapshots, removals."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import pytest
from dl_fakes import FakeHttp, ManualClock, ok, vllm_text

from datalayer import (
    DataLayer,
    DataLayerOptions,
    DiscoveryEvent,
    EndpointRecord,
    EventKind,
    FetchError,
    Health,
    StaticDiscovery,
)
from datalayer.discovery import SpecTracker, make_spec
from datalayer.poller import PollSettings, SourcePoller
from datalayer.sources import MetricsDataSource, ModelsDataSource
from scheduler.types import EndpointView, MetricsView

A, B = "10.0.0.1:8000", "10.0.0.2:8000"


def _layer(http: FakeHttp, clock: ManualClock, addresses: Sequence[str] = (A, B)) -> DataLayer:
    return DataLayer(
        StaticDiscovery.from_addresses(addresses),
        http=http,
        options=DataLayerOptions(staleness_threshold=2.0),
        clock=clock,
    )


async def _poll(layer: DataLayer, address: str) -> None:
    for source in layer.sources:
        poller = SourcePoller(
            address,
            source,
            layer._store,
            layer._specs,
            layer._http,
            PollSettings(0.05, 1.0, 1 << 20),
            layer._clock,
            asyncio.sleep,
        )
        await poller.poll_once()


def _added(*addresses: str) -> list[DiscoveryEvent]:
    return SpecTracker().update(make_spec(a) for a in addresses)


async def test_records_satisfy_scheduler_protocols() -> None:
    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text(3, 4, 0.5)))
    layer = _layer(http, clock, [A])
    layer.apply(_added(A))
    await _poll(layer, A)
    (record,) = layer.snapshot()
    assert isinstance(record, EndpointView)
    assert isinstance(record.metrics, MetricsView)


async def test_good_scrape_makes_endpoint_ready_with_metrics() -> None:
    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text(3, 4, 0.5, lora=[(5.0, 4, "x,y", "z")])))
    http.set(
        f"http://{A}/v1/models",
        ok('{"object":"list","data":[{"id":"base","parent":null},{"id":"x","parent":"base"}]}'),
    )
    layer = _layer(http, clock, [A])
    layer.apply(_added(A))
    assert layer.get(A) == EndpointRecord(address=A, name=A)  # not scraped yet: not ready
    await _poll(layer, A)
    record = layer.get(A)
    assert record is not None
    assert (record.ready, record.health, record.last_error) == (True, Health.HEALTHY, None)
    m = record.metrics
    assert (m.waiting_queue_size, m.running_requests, m.kv_cache_usage) == (3, 4, 0.5)
    assert (m.max_lora, m.running_adapters, m.waiting_adapters) == (4, {"x", "y"}, {"z"})
    assert (m.block_size, m.num_gpu_blocks, m.updated_at) == (16, 1024, clock.now)
    assert record.attributes["models"] == {"base"}
    assert dict(record.attributes["adapters"]) == {"x": "base"}


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (FetchError("connection refused"), "connection refused"),
        (FetchError("timed out after 1s"), "timed out"),
        (ok("internal error", status=500), "HTTP 500"),
        (ok("<html>garbage</html>"), "missing"),
        (ok(vllm_text(1, 2, 0.3)[:90]), "missing"),  # truncated mid-body
        (ok('vllm:num_requests_waiting{model_name="m} 1\n'), "unterminated"),
        (ok(b"\xff\xfe binary"), "UTF-8"),
        (ok(vllm_text(-1, 2, 0.3)), "impossible value"),
        (ok("x" * (2 << 20)), "larger than"),
    ],
)
async def test_bad_output_marks_only_that_endpoint_unhealthy(answer: object, error: str) -> None:
    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text(1, 1, 0.1)))
    http.set(f"http://{B}/metrics", ok(vllm_text(2, 2, 0.2)))
    layer = _layer(http, clock)
    layer.apply(_added(A, B))
    await _poll(layer, A)
    await _poll(layer, B)
    http.set(f"http://{A}/metrics", answer)  # type: ignore[arg-type]
    clock.advance(0.05)
    await _poll(layer, A)
    await _poll(layer, B)
    a, b = layer.get(A), layer.get(B)
    assert a is not None and b is not None
    assert (a.ready, a.health) == (False, Health.UNHEALTHY)
    assert a.last_error is not None and error in a.last_error
    assert a.metrics.waiting_queue_size == 1  # last good metrics kept, with their old timestamp
    assert a.metrics.updated_at == clock.now - 0.05
    assert (b.ready, b.health, b.metrics.waiting_queue_size, b.metrics.updated_at) == (
        True,
        Health.HEALTHY,
        2,
        clock.now,
    )
    http.set(f"http://{A}/metrics", ok(vllm_text(5, 1, 0.1)))
    await _poll(layer, A)
    a = layer.get(A)
    assert a is not None and (a.ready, a.health, a.last_error, a.metrics.waiting_queue_size) == (
        True,
        Health.HEALTHY,
        None,
        5,
    )


async def test_models_failure_keeps_attributes_and_health() -> None:
    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text()))
    http.set(f"http://{A}/v1/models", ok('{"data":[{"id":"base","parent":null}]}'))
    layer = _layer(http, clock, [A])
    layer.apply(_added(A))
    await _poll(layer, A)
    http.set(f"http://{A}/v1/models", ok("{not json"))
    await _poll(layer, A)
    record = layer.get(A)
    assert record is not None and record.ready and record.attributes["models"] == {"base"}


async def test_staleness_sweep_marks_old_metrics_stale() -> None:
    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text()))
    http.set(f"http://{B}/metrics", ok(vllm_text()))
    layer = _layer(http, clock)
    layer.apply(_added(A, B))
    await _poll(layer, A)
    await _poll(layer, B)
    clock.advance(1.5)
    await _poll(layer, B)
    clock.advance(0.6)  # A: 2.1 s old, B: 0.6 s old
    layer.sweep()
    a, b = layer.get(A), layer.get(B)
    assert a is not None and b is not None
    assert (a.health, a.ready) == (Health.STALE, False) and "no good scrape" in (a.last_error or "")
    assert (b.health, b.ready) == (Health.HEALTHY, True)
    assert layer.aggregates().ready_endpoints == 1
    await _poll(layer, A)
    assert layer.get(A).health is Health.HEALTHY  # type: ignore[union-attr]


async def test_snapshot_is_cached_until_something_changes() -> None:
    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text()))
    layer = _layer(http, clock, [A, B])
    layer.apply(_added(A, B))
    first = layer.snapshot()
    assert layer.snapshot() is first
    await _poll(layer, A)
    second = layer.snapshot()
    assert second is not first and second[0].ready and not first[0].ready
    await _poll(layer, B)  # refused again: nothing changes
    third = layer.snapshot()
    await _poll(layer, B)
    assert layer.snapshot() is third


async def test_updates_relabel_and_removals_notify_subscribers() -> None:
    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text(7)))
    layer = _layer(http, clock, [A, B])
    removed: list[frozenset[str]] = []
    layer.on_endpoints_removed(removed.append)
    unsubscribe = layer.on_endpoints_removed(lambda _: (_ for _ in ()).throw(RuntimeError("boom")))
    tracker = SpecTracker()
    layer.apply(tracker.update([make_spec(A), make_spec(B)]))
    await _poll(layer, A)
    layer.apply(tracker.update([make_spec(A, name="pod-a", labels={"role": "decode"})]))
    record = layer.get(A)
    assert record is not None
    assert (record.name, dict(record.labels), record.ready, record.metrics.waiting_queue_size) == (
        "pod-a",
        {"role": "decode"},
        True,
        7,
    )
    assert removed == [frozenset({B})] and layer.get(B) is None
    unsubscribe()
    layer.apply([DiscoveryEvent(EventKind.REMOVED, make_spec(A))])
    assert removed == [frozenset({B}), frozenset({A})]
    await _poll(layer, A)  # a scrape finishing after removal does not resurrect the endpoint
    assert layer.snapshot() == ()


async def test_unknown_engine_uses_the_default_engine_mapping() -> None:
    # Upstream's mapping registry falls back to the default engine for an engine it has no mapping for.
    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text(3)))
    layer = _layer(http, clock, [A])
    spec = make_spec(A, labels={"inference.networking.k8s.io/engine-type": "foo"})
    layer.apply(SpecTracker().update([spec]))
    await _poll(layer, A)
    record = layer.get(A)
    assert record is not None and record.engine == "foo" and record.health is Health.HEALTHY
    assert record.metrics.waiting_queue_size == 3


async def test_start_stop_runs_pollers_and_marks_synced() -> None:
    http = FakeHttp()
    http.set(f"http://{A}/metrics", ok(vllm_text(2)))
    layer = DataLayer(
        StaticDiscovery.from_addresses([A, B]),
        http=http,
        options=DataLayerOptions(refresh_interval=0.01),
        sources=[MetricsDataSource(), ModelsDataSource(interval=0.5)],
    )
    assert not layer.synced
    await layer.start()
    try:
        await asyncio.wait_for(layer.wait_synced(), 1)
        for _ in range(100):
            if http.calls.count(f"http://{A}/metrics") >= 5:
                break
            await asyncio.sleep(0.01)
        assert http.calls.count(f"http://{A}/metrics") >= 5
        assert [r.ready for r in layer.snapshot()] == [True, False]
        assert layer.aggregates().per_endpoint_queue == {A: 2}
    finally:
        await layer.stop()
    calls = len(http.calls)
    await asyncio.sleep(0.05)
    assert len(http.calls) == calls  # nothing polls after stop()


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="refresh_interval"):
        DataLayerOptions(refresh_interval=0)
    with pytest.raises(ValueError, match="scheme"):
        DataLayerOptions(scheme="ftp")
    with pytest.raises(ValueError, match="host:port"):
        StaticDiscovery.from_addresses(["nope"])


def test_pool_aggregates_use_fresh_ready_endpoints_only() -> None:
    from datalayer import EndpointMetrics, pool_aggregates

    def rec(name: str, ready: bool, updated: float, q: int, r: int, kv: float) -> EndpointRecord:
        metrics = EndpointMetrics(
            waiting_queue_size=q, running_requests=r, kv_cache_usage=kv, updated_at=updated
        )
        return EndpointRecord(address=f"{name}:1", name=name, ready=ready, metrics=metrics)

    now = 100.0
    records = [
        rec("a", True, 99.5, 2, 4, 0.2),
        rec("b", True, 99.9, 6, 8, 0.6),
        rec("stale", True, 97.0, 100, 100, 1.0),  # older than the 2 s threshold
        rec("down", False, 99.9, 50, 50, 1.0),
    ]
    agg = pool_aggregates(records, now, 2.0)
    assert (agg.ready_endpoints, agg.average_queue_size, agg.average_running_requests) == (2, 4.0, 6.0)
    assert agg.average_kv_cache_usage == pytest.approx(0.4)
    assert dict(agg.per_endpoint_queue) == {"a": 2, "b": 6}
    empty = pool_aggregates(records[2:], now, 2.0)
    assert (empty.ready_endpoints, empty.average_queue_size, dict(empty.per_endpoint_queue)) == (0, 0.0, {})


async def test_errors_are_logged_on_transitions_only() -> None:
    from structlog.testing import capture_logs

    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text()))
    http.set(f"http://{A}/v1/models", ok('{"data": []}'))
    layer = _layer(http, clock, [A])
    layer.apply(_added(A))
    with capture_logs() as logs:
        await _poll(layer, A)
        http.set(f"http://{A}/metrics", ok("boom", status=503))
        for _ in range(3):
            await _poll(layer, A)
        http.set(f"http://{A}/metrics", ok(vllm_text()))
        for _ in range(3):
            await _poll(layer, A)
    events = [e["event"] for e in logs if e["log_level"] in ("warning", "error", "info")]
    assert events == ["endpoint scrape failed", "endpoint healthy again"]


async def test_crashing_plugin_marks_endpoint_unhealthy_and_polling_goes_on() -> None:
    from datalayer.records import EndpointSpec
    from datalayer.sources import SourceUpdate

    class Buggy(MetricsDataSource):
        calls = 0

        def extract(self, body: bytes, endpoint: EndpointSpec, now: float) -> SourceUpdate:
            Buggy.calls += 1
            if Buggy.calls == 2:
                raise KeyError("oops")
            return super().extract(body, endpoint, now)

    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/metrics", ok(vllm_text()))
    layer = DataLayer(StaticDiscovery.from_addresses([A]), http=http, sources=[Buggy()], clock=clock)
    layer.apply(_added(A))
    for expected in (Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY):
        await _poll(layer, A)
        record = layer.get(A)
        assert record is not None and record.health is expected
        if expected is Health.UNHEALTHY:
            assert "crashed: KeyError" in (record.last_error or "")


def test_remove_and_re_add_in_one_batch_keeps_the_endpoint() -> None:
    http, clock = FakeHttp(), ManualClock()
    layer = _layer(http, clock, [A])
    removed: list[frozenset[str]] = []
    layer.on_endpoints_removed(removed.append)
    layer.apply(_added(A))
    spec = make_spec(A, name="again")
    layer.apply([DiscoveryEvent(EventKind.REMOVED, spec), DiscoveryEvent(EventKind.ADDED, spec)])
    record = layer.get(A)
    assert record is not None and record.name == "again" and layer._specs[A].name == "again"
    assert removed == []


async def test_crashed_discovery_restarts_and_reconciles() -> None:
    from datalayer.discovery import DiscoverySink

    class Flaky:
        runs = 0

        async def run(self, sink: DiscoverySink) -> None:
            Flaky.runs += 1
            if Flaky.runs == 1:
                sink.apply(SpecTracker(sink.current()).update([make_spec(A), make_spec(B)]))
                raise RuntimeError("discovery bug")
            sink.apply(SpecTracker(sink.current()).update([make_spec(A)]))
            sink.mark_synced()
            await asyncio.Event().wait()

    async def quick_sleep(seconds: float) -> None:
        await asyncio.sleep(min(seconds, 0.01))

    removed: list[frozenset[str]] = []
    layer = DataLayer(Flaky(), http=FakeHttp(), sources=[], sleep=quick_sleep)
    layer.on_endpoints_removed(removed.append)
    await layer.start()
    try:
        await asyncio.wait_for(layer.wait_synced(), 2)
        assert [r.address for r in layer.snapshot()] == [A] and removed == [frozenset({B})]
        assert Flaky.runs == 2
    finally:
        await layer.stop()


async def test_poller_keeps_a_fixed_grid_and_skips_missed_ticks() -> None:
    clock = ManualClock(now=0.0)
    http = FakeHttp()
    times: list[float] = []
    slow_at = {3}

    def answer() -> object:
        times.append(round(clock.now, 3))
        if len(times) in slow_at:
            clock.advance(0.35)  # this poll takes 3.5 intervals
        return ok(vllm_text())

    http.set(f"http://{A}/metrics", answer)  # type: ignore[arg-type]

    async def fake_sleep(seconds: float) -> None:
        clock.advance(seconds)
        await asyncio.sleep(0)

    layer = DataLayer(
        StaticDiscovery.from_addresses([A]), http=http, sources=[MetricsDataSource()], clock=clock
    )
    layer.apply(_added(A))
    poller = SourcePoller(
        A,
        layer.sources[0],
        layer._store,
        layer._specs,
        http,
        PollSettings(0.1, 1.0, 1 << 20),
        clock,
        fake_sleep,
    )
    task = asyncio.create_task(poller.run())
    while len(times) < 8:
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    offset = times[1]  # the per-address offset within the first interval
    assert 0 <= offset < 0.1 and times[0] == 0.0
    grid = [round(t - offset, 3) for t in times[1:]]
    # polls on the grid offset + k * 0.1; the slow poll at 0.1 overran to 0.45: ticks 0.2 to 0.4 skipped
    assert grid == [0.0, 0.1, 0.5, 0.6, 0.7, 0.8, 0.9]
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(times[1:])]
    assert all(g >= 0.1 - 1e-9 for g in gaps)
    assert sum(1 for g in gaps if g > 0.1 + 1e-9) == 1  # exactly one gap where ticks were skipped


@pytest.mark.parametrize(
    ("address", "metrics_port", "source", "url"),
    [
        ("10.0.0.1:8000", 0, MetricsDataSource(), "http://10.0.0.1:8000/metrics"),
        ("10.0.0.1:8000", 9100, MetricsDataSource(path="/prom"), "http://10.0.0.1:9100/prom"),
        ("10.0.0.1:8000", 9100, ModelsDataSource(), "http://10.0.0.1:8000/v1/models"),
        ("[fd00::1]:8000", 0, MetricsDataSource(), "http://[fd00::1]:8000/metrics"),
    ],
)
def test_poller_urls(address: str, metrics_port: int, source: object, url: str) -> None:
    settings = PollSettings(0.05, 1.0, 1024, "http", metrics_port)
    poller = SourcePoller(address, source, None, {}, FakeHttp(), settings, ManualClock(), asyncio.sleep)  # type: ignore[arg-type]
    assert poller.url == url


async def test_without_a_metrics_source_endpoints_are_ready_when_discovered() -> None:
    # dataLayer: {injectDefaults: false} (llm-d's successDataLayerOptOutText): upstream runs without metrics
    from structlog.testing import capture_logs

    http, clock = FakeHttp(), ManualClock()
    http.set(f"http://{A}/v1/models", ok('{"data":[{"id":"base"}]}'))
    with capture_logs() as logs:
        layer = DataLayer(
            StaticDiscovery.from_addresses([A]), http=http, sources=[ModelsDataSource()], clock=clock
        )
    assert not layer.collects_metrics
    assert any("no metrics data source" in entry["event"] for entry in logs)
    layer.apply(_added(A))
    record = layer.get(A)
    assert record is not None and record.ready and record.health is Health.UNKNOWN
    await _poll(layer, A)
    clock.advance(60.0)
    layer.sweep()
    record = layer.get(A)
    assert record is not None and record.ready and record.attributes["models"] == {"base"}


def test_with_a_metrics_source_endpoints_wait_for_their_first_scrape() -> None:
    layer = _layer(FakeHttp(), ManualClock(), [A])
    assert layer.collects_metrics
    layer.apply(_added(A))
    assert layer.get(A).ready is False  # type: ignore[union-attr]
