"""File discovery: format, errors naming file and field, change detection, last good set kept."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from datalayer.discovery.base import SpecTracker
from datalayer.discovery.file import (
    EndpointsFileError,
    FileDiscovery,
    load_endpoints_file,
    parse_endpoints_document,
)
from datalayer.records import DiscoveryEvent, EndpointSpec, EventKind


class Sink:
    def __init__(self) -> None:
        self.batches: list[list[tuple[EventKind, str, str, dict[str, str]]]] = []
        self.synced = 0

    def apply(self, events: Sequence[DiscoveryEvent]) -> None:
        self.batches.append([(e.kind, e.spec.address, e.spec.name, dict(e.spec.labels)) for e in events])

    def current(self) -> dict[str, EndpointSpec]:
        return {}

    def mark_synced(self) -> None:
        self.synced += 1


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a distinct mtime on coarse clocks


def test_formats() -> None:
    yaml_doc = """
endpoints:
  - 10.0.0.1:8000
  - address: 10.0.0.2:8001
    name: b
    labels: {inference.networking.k8s.io/engine-type: sglang, zone: a}
"""
    specs = parse_endpoints_document(yaml_doc)
    assert [(s.address, s.name, s.engine) for s in specs] == [
        ("10.0.0.1:8000", "10.0.0.1:8000", "vllm"),
        ("10.0.0.2:8001", "b", "sglang"),
    ]
    json_list = '[{"address": "[::1]:9000", "labels": {"a": "b"}}]'
    assert parse_endpoints_document(json_list)[0].address == "[::1]:9000"


@pytest.mark.parametrize(
    ("text", "location"),
    [
        ("endpoints: [nope]", "endpoints[0].address"),
        ("endpoints: [{address: '1.2.3.4:1', labels: {a: 1}}]", "endpoints[0].labels"),
        ("endpoints: [{address: '1.2.3.4:1', extra: 1}]", "endpoints[0].extra"),
        ("endpoints: ['1.2.3.4:1', '1.2.3.4:1']", "endpoints[1].address"),
        ("endpoints: [{name: x}]", "endpoints[0].address"),
        ("endpoint: []", "endpoint"),
        ("42", "endpoints"),
        ("endpoints: [", ""),
    ],
)
def test_errors_name_file_and_field(text: str, location: str) -> None:
    with pytest.raises(EndpointsFileError) as err:
        parse_endpoints_document(text, "eps.yaml")
    assert err.value.location == location
    assert str(err.value).startswith("eps.yaml: ")


def test_missing_file_error(tmp_path: Path) -> None:
    with pytest.raises(EndpointsFileError, match="cannot read"):
        load_endpoints_file(str(tmp_path / "absent.yaml"))


def test_changes_apply_and_broken_file_keeps_last_good_set(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "eps.yaml"
    _write(path, "endpoints: ['10.0.0.1:1', '10.0.0.2:1']")
    source, tracker, sink = FileDiscovery(str(path)), SpecTracker(), Sink()
    source.check(tracker, sink)
    assert [b[1] for b in sink.batches[0]] == ["10.0.0.1:1", "10.0.0.2:1"] and sink.synced == 1
    source.check(tracker, sink)  # unchanged: nothing re-applied
    assert len(sink.batches) == 1
    _write(path, "endpoints: ['10.0.0.2:1', {address: '10.0.0.3:1', labels: {r: x}}]")
    source.check(tracker, sink)
    assert sorted(sink.batches[1], key=lambda e: e[1]) == [
        (EventKind.REMOVED, "10.0.0.1:1", "10.0.0.1:1", {}),
        (EventKind.ADDED, "10.0.0.3:1", "10.0.0.3:1", {"r": "x"}),
    ]
    _write(path, "endpoints: ['10.0.0.2:1', {address: '10.0.0.3:1', labels: {r: y}}]")
    source.check(tracker, sink)
    assert sink.batches[2] == [(EventKind.UPDATED, "10.0.0.3:1", "10.0.0.3:1", {"r": "y"})]
    _write(path, "endpoints: [{address: broken}]")
    source.check(tracker, sink)
    assert source._last_problem is not None and "endpoints[0].address" in source._last_problem
    _write(path, "endpoints: [{address: broken}]  # still broken")
    source.check(tracker, sink)
    path.unlink()
    source.check(tracker, sink)
    assert len(sink.batches) == 3  # the last good set stays
    _write(path, "endpoints: ['10.0.0.2:1']")
    source.check(tracker, sink)
    assert sink.batches[3] == [(EventKind.REMOVED, "10.0.0.3:1", "10.0.0.3:1", {"r": "y"})]


async def test_broken_at_start_is_not_synced_until_fixed(tmp_path: Path) -> None:
    path = tmp_path / "eps.json"
    _write(path, "{not json")
    sink = Sink()
    task = asyncio.create_task(FileDiscovery(str(path), poll_interval=0.01).run(sink))
    try:
        await asyncio.sleep(0.05)
        assert sink.synced == 0 and sink.batches == []
        _write(path, '{"endpoints": ["10.0.0.9:80"]}')
        for _ in range(100):
            if sink.synced:
                break
            await asyncio.sleep(0.01)
        assert sink.synced >= 1 and sink.batches[0][0][1] == "10.0.0.9:80"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
