"""Poll and extract errors reported to the data layer's error sinks (upstream's data-layer counters)."""

from __future__ import annotations

import asyncio

import pytest
from dl_fakes import FakeHttp, ManualClock, ok, vllm_text

from datalayer import DataLayer, DataLayerOptions, StaticDiscovery
from datalayer.discovery import SpecTracker, make_spec
from datalayer.http import FetchError
from datalayer.poller import PollSettings, SourcePoller
from datalayer.sources import MetricsDataSource, ModelsDataSource

A = "10.0.0.1:8000"


async def _poll(http: FakeHttp, source: object, errors: list[tuple[str, str | None]]) -> None:
    clock = ManualClock()
    layer = DataLayer(StaticDiscovery.from_addresses([A]), http=http, options=DataLayerOptions(), clock=clock)
    layer.apply(SpecTracker().update([make_spec(A)]))
    layer.on_poll_error(lambda source_type, extractor: errors.append((source_type, extractor)))
    poller = SourcePoller(
        A, source, layer._store, layer._specs, http, PollSettings(0.05, 1.0, 1 << 20), clock, asyncio.sleep,
        on_error=layer._report_error,
    )  # type: ignore[arg-type]  # fmt: skip
    await poller.poll_once()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (ok(vllm_text(1, 1, 0.1)), []),
        (FetchError("connection refused"), [("metrics-data-source", None)]),
        (ok("internal error", status=500), [("metrics-data-source", None)]),
        (ok("<html>garbage</html>"), [("metrics-data-source", "core-metrics-extractor")]),
        (ok(b"\xff\xfe binary"), [("metrics-data-source", "core-metrics-extractor")]),
    ],
)
async def test_metrics_source_failures_are_poll_or_extract_errors(
    answer: object, expected: list[tuple[str, str | None]]
) -> None:
    http = FakeHttp()
    http.set(f"http://{A}/metrics", answer)  # type: ignore[arg-type]
    errors: list[tuple[str, str | None]] = []
    await _poll(http, MetricsDataSource(), errors)
    assert errors == expected


async def test_models_source_bad_json_is_an_extract_error() -> None:
    http = FakeHttp()
    http.set(f"http://{A}/v1/models", ok("{not json"))
    errors: list[tuple[str, str | None]] = []
    await _poll(http, ModelsDataSource(), errors)
    assert errors == [("models-data-source", "models-data-extractor")]
