"""Names in declared endpoints: expansion to ip:port endpoints, start-up strictness, re-resolution
through the discovery path (additions / removals), last good addresses kept, bounds."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from dl_fakes import FakeHttp, ManualClock
from structlog.testing import capture_logs

from datalayer import DataLayer, DataLayerOptions
from datalayer.discovery import (
    FileDiscovery,
    NameResolution,
    ResolutionError,
    ResolveError,
    ResolvingDiscovery,
    StaticDiscovery,
    make_spec,
)
from datalayer.records import DiscoveryEvent, EndpointSpec, EventKind

LABELS = {"inference.networking.k8s.io/engine-type": "sglang", "zone": "a"}


class FakeResolver:
    """Answers from ``table`` (a name -> addresses, or a problem string); counts lookups."""

    def __init__(self, table: dict[str, tuple[str, ...] | str]) -> None:
        self.table = table
        self.lookups = 0

    async def resolve(self, name: str) -> tuple[str, ...]:
        self.lookups += 1
        answer = self.table.get(name, "Name or service not known")
        if isinstance(answer, str):
            raise ResolveError(answer)
        return answer


class Sink:
    def __init__(self) -> None:
        self.specs: dict[str, EndpointSpec] = {}
        self.batches: list[list[tuple[EventKind, str]]] = []
        self.synced = 0
        self.changed = asyncio.Event()

    def apply(self, events: Sequence[DiscoveryEvent]) -> None:
        self.batches.append([(e.kind, e.spec.address) for e in events])
        for e in events:
            if e.kind is EventKind.REMOVED:
                del self.specs[e.spec.address]
            else:
                self.specs[e.spec.address] = e.spec
        self.changed.set()

    def mark_synced(self) -> None:
        self.synced += 1
        self.changed.set()

    def current(self) -> Mapping[str, EndpointSpec]:
        return dict(self.specs)

    async def next_change(self) -> None:
        self.changed.clear()
        await asyncio.wait_for(self.changed.wait(), 5)


class Ticks:
    """A ``sleep`` that returns only when the test calls :meth:`tick`."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[None] = asyncio.Queue()

    async def __call__(self, seconds: float) -> None:
        await self._queue.get()

    def tick(self) -> None:
        self._queue.put_nowait(None)


def _specs(*addresses: str, labels: dict[str, str] | None = None) -> list[EndpointSpec]:
    return [make_spec(a, labels=labels) for a in addresses]


async def test_names_expand_to_one_ip_endpoint_per_address() -> None:
    resolver = FakeResolver({"solo.test": ("10.0.0.5",), "pair.test": ("fd00::2", "10.0.0.7", "10.0.0.6")})
    specs = [*_specs("10.0.0.1:80", "solo.test:8000"), make_spec("pair.test:9000", "gpu", LABELS)]
    out = await NameResolution(resolver).expand(specs, strict=True)
    assert [(s.address, s.name) for s in out] == [
        ("10.0.0.1:80", "10.0.0.1:80"),  # IP literals are kept as they are
        ("10.0.0.5:8000", "solo.test:8000"),  # one address: the entry's name
        ("10.0.0.6:9000", "gpu/10.0.0.6"),  # several: the entry's name and the IP, IPv4 first, sorted
        ("10.0.0.7:9000", "gpu/10.0.0.7"),
        ("[fd00::2]:9000", "gpu/fd00::2"),  # IPv6 bracketed, as Envoy parses a destination
    ]
    assert all(s.labels == LABELS and s.engine == "sglang" for s in out[2:])


async def test_names_are_case_insensitive_and_looked_up_once_per_round() -> None:
    resolver = FakeResolver({"sim.test": ("10.0.0.5",)})
    out = await NameResolution(resolver).expand(_specs("sim.test:1", "SIM.TEST.:2"))
    assert [s.address for s in out] == ["10.0.0.5:1", "10.0.0.5:2"] and resolver.lookups == 1


@pytest.mark.parametrize(
    "table, addresses, declared, message",
    [
        ({}, ("10.0.0.1:1", "Nope.test:80"), "Nope.test:80", "cannot resolve host name 'Nope.test': Name or"),
        ({"a.test": "timed out"}, ("a.test:80",), "a.test:80", "'a.test': timed out"),
        ({"a.test": ("bogus",)}, ("a.test:80",), "a.test:80", "not an IP address"),
        ({"a.test": ()}, ("a.test:80",), "a.test:80", "no IPv4 or IPv6 address"),
        (
            {"a.test": ("10.0.0.1",)},
            ("10.0.0.1:80", "a.test:80"),
            "a.test:80",
            "a.test:80 and 10.0.0.1:80 are the same endpoint 10.0.0.1:80",
        ),
    ],
)
async def test_start_up_refuses_what_does_not_resolve_naming_the_entry(
    table: dict[str, tuple[str, ...] | str], addresses: tuple[str, ...], declared: str, message: str
) -> None:
    with pytest.raises(ResolutionError, match=message) as caught:
        await NameResolution(FakeResolver(table)).expand(_specs(*addresses), strict=True)
    assert caught.value.declared == declared


async def test_later_failures_keep_the_last_good_addresses_and_log_once() -> None:
    resolver = FakeResolver({"a.test": ("10.0.0.1",), "b.test": ("10.0.0.2",)})
    resolution = NameResolution(resolver)
    specs = _specs("a.test:80", "b.test:80")
    assert len(await resolution.expand(specs, strict=True)) == 2
    with capture_logs() as logs:
        resolver.table["a.test"] = "temporary failure"
        resolver.table["b.test"] = ("10.0.0.3",)
        for _ in range(3):
            out = await resolution.expand(specs)
            assert [s.address for s in out] == ["10.0.0.1:80", "10.0.0.3:80"]
        resolver.table["a.test"] = ("10.0.0.1",)
        await resolution.expand(specs)
    assert [(e["log_level"], e["event"], e["name"]) for e in logs] == [
        ("warning", "endpoint host name does not resolve; keeping its last good addresses", "a.test"),
        ("info", "endpoint host name re-resolved", "b.test"),
        ("info", "endpoint host name resolves again", "a.test"),
    ]
    assert logs[0]["kept"] == ["10.0.0.1"] and logs[1]["added"] == ["10.0.0.3"]


async def test_a_name_never_resolved_later_yields_nothing_and_a_duplicate_keeps_the_first() -> None:
    resolver = FakeResolver({"a.test": ("10.0.0.1",)})
    resolution = NameResolution(resolver)
    with capture_logs() as logs:
        out = await resolution.expand(_specs("10.0.0.1:80", "a.test:80", "new.test:80"))
        await resolution.expand(_specs("10.0.0.1:80", "a.test:80", "new.test:80"))
    assert [s.address for s in out] == ["10.0.0.1:80"]
    assert sorted(e["event"] for e in logs) == [
        "endpoint entries resolve to the same address; keeping the first",
        "endpoint host name does not resolve; keeping its last good addresses",
    ]


async def test_addresses_per_name_are_bounded() -> None:
    many = tuple(f"10.0.{i // 256}.{i % 256}" for i in range(300, 0, -1))
    resolution = NameResolution(FakeResolver({"big.test": many}), max_addresses=4)
    with capture_logs() as logs:
        out = await resolution.expand(_specs("big.test:80"))
        await resolution.expand(_specs("big.test:80"))
    assert [s.address for s in out] == ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"]
    assert [e["event"] for e in logs] == [
        "endpoint host name has more addresses than allowed; keeping the first"
    ]
    assert (logs[0]["addresses"], logs[0]["kept"]) == (300, 4)


async def test_re_resolution_applies_additions_and_removals_through_the_sink() -> None:
    resolver = FakeResolver({"pool.test": ("10.0.0.1", "10.0.0.2")})
    ticks, sink = Ticks(), Sink()
    inner = StaticDiscovery(_specs("10.0.0.9:80", "pool.test:80"))
    source = ResolvingDiscovery(inner, NameResolution(resolver), interval=5.0, sleep=ticks)
    task = asyncio.create_task(source.run(sink))
    try:
        await sink.next_change()
        await asyncio.sleep(0)
        assert sink.synced == 1
        assert sink.batches == [
            [
                (EventKind.ADDED, "10.0.0.9:80"),
                (EventKind.ADDED, "10.0.0.1:80"),
                (EventKind.ADDED, "10.0.0.2:80"),
            ]
        ]
        resolver.table["pool.test"] = ("10.0.0.2", "10.0.0.3")
        ticks.tick()
        await sink.next_change()
        assert sink.batches[1] == [(EventKind.REMOVED, "10.0.0.1:80"), (EventKind.ADDED, "10.0.0.3:80")]
        assert sink.specs["10.0.0.3:80"].name == "pool.test:80/10.0.0.3"
        resolver.table["pool.test"] = "SERVFAIL"
        ticks.tick()
        await sink.next_change()  # synced again, nothing applied: the last good set stays
        assert len(sink.batches) == 2 and sorted(sink.specs) == ["10.0.0.2:80", "10.0.0.3:80", "10.0.0.9:80"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_endpoints_file_changes_are_resolved_as_they_come(tmp_path: Path) -> None:
    path = tmp_path / "eps.yaml"
    path.write_text("endpoints: [a.test:80]\n")
    resolver = FakeResolver({"a.test": ("10.0.0.1",), "b.test": ("fd00::b",)})
    sink = Sink()
    source = ResolvingDiscovery(
        FileDiscovery(str(path), poll_interval=0.01), NameResolution(resolver), interval=0
    )
    task = asyncio.create_task(source.run(sink))
    try:
        await sink.next_change()
        assert sink.batches == [[(EventKind.ADDED, "10.0.0.1:80")]]
        path.write_text("endpoints: [b.test:80, '10.0.0.1:80']\n")
        while len(sink.batches) < 2:
            await sink.next_change()
        assert sink.batches[1] == [(EventKind.ADDED, "[fd00::b]:80"), (EventKind.UPDATED, "10.0.0.1:80")]
        assert sink.specs["10.0.0.1:80"].name == "10.0.0.1:80"  # the same endpoint, renamed: declared by IP
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_crash_of_the_wrapped_source_is_raised_and_the_timer_stops() -> None:
    class Broken:
        async def run(self, sink: object) -> None:
            raise RuntimeError("boom")

    source = ResolvingDiscovery(Broken(), NameResolution(FakeResolver({})), interval=5.0, sleep=Ticks())
    with pytest.raises(RuntimeError, match="boom"):
        await asyncio.wait_for(source.run(Sink()), 5)
    assert [t for t in asyncio.all_tasks() if t.get_name() == "discovery-resolve-timer"] == []


async def test_data_layer_scrapes_and_serves_the_resolved_addresses() -> None:
    resolver = FakeResolver({"sim.test": ("10.0.0.5",)})
    source = ResolvingDiscovery(
        StaticDiscovery(_specs("sim.test:8000")), NameResolution(resolver), interval=5.0, sleep=Ticks()
    )
    http = FakeHttp()
    layer = DataLayer(source, http=http, options=DataLayerOptions(), clock=ManualClock())
    await layer.start()
    try:
        await asyncio.wait_for(layer.wait_synced(), 5)
        assert [(r.address, r.name) for r in layer.snapshot()] == [("10.0.0.5:8000", "sim.test:8000")]
        for _ in range(100):
            if http.calls:
                break
            await asyncio.sleep(0.01)
        assert "http://10.0.0.5:8000/metrics" in http.calls
    finally:
        await layer.stop()


def test_interval_and_bounds_are_validated() -> None:
    with pytest.raises(ValueError, match="interval"):
        ResolvingDiscovery(StaticDiscovery([]), NameResolution(FakeResolver({})), interval=-1)
    with pytest.raises(ValueError, match="at least 1"):
        NameResolution(FakeResolver({}), max_addresses=0)
