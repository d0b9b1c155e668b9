"""haPopulateNonLeaderDatastore (llm-d-router, default true): with it off and leader election on, the
data layer (discovery + scraping) runs only while this replica leads."""

from __future__ import annotations

from typing import Any

from datalayer import DataLayer, DataLayerOptions, FetchError, HttpResponse, StaticDiscovery
from epp.app.picker import PickerApp, _LeaderOnlyDataLayer
from epp.config.feature_gates import parse_feature_gates
from epp.config.options import parse_options

A = "10.0.0.1:8000"


class _Http:
    async def get(self, url: str, *, timeout: float, max_bytes: int) -> HttpResponse:
        raise FetchError("no server")

    async def aclose(self) -> None:
        pass


class _Server:
    def __init__(self, layer: DataLayer) -> None:
        self.layer = layer
        self.calls: list[tuple[bool, bool]] = []  # (leader, data layer running at the time)

    async def set_leader(self, leader: bool) -> None:
        self.calls.append((leader, self.layer._running))


async def test_data_layer_runs_only_while_leading() -> None:
    layer = DataLayer(StaticDiscovery.from_addresses([A]), http=_Http(), options=DataLayerOptions())
    server = _Server(layer)
    target = _LeaderOnlyDataLayer(server, layer)  # type: ignore[arg-type]
    assert not layer._running
    await target.set_leader(True)
    await layer.wait_synced()
    assert layer._running and layer.get(A) is not None
    await target.set_leader(False)
    assert not layer._running and layer._tasks == [] and layer._pollers == {}
    await target.set_leader(True)  # leads again: discovery and scraping resume
    assert layer._running
    await layer.stop()
    assert server.calls == [(True, True), (False, True), (True, True)]  # ready only once scraping runs


def _app(flags: list[str], gates: Any) -> PickerApp:
    options = parse_options(["--endpoints", A, *flags])
    return PickerApp(options, None, None, None, None, gates=parse_feature_gates(gates))  # type: ignore[arg-type]


def test_leader_only_needs_leader_election_and_the_gate_off() -> None:
    off = ["haPopulateNonLeaderDatastore=false"]
    assert _app(["--ha-enable-leader-election"], off).leader_only_datalayer
    assert not _app(["--ha-enable-leader-election"], None).leader_only_datalayer  # default: populate
    assert not _app([], off).leader_only_datalayer  # no election: this replica always serves
