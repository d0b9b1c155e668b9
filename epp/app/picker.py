"""The assembled picker and its lifecycle (see :mod:`epp.app`): start the servers, the data layer and
the background tasks (readiness, leader election, the InferencePool-mode watches); stop them in order."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from datalayer import DataLayer, HttpClient
from epp.admission import InMemoryObjectiveStore
from epp.admission.rewrites import RewriteStore
from epp.app.errors import StartupError
from epp.app.readiness import answered, wait_for_an_answer
from epp.config.feature_gates import HA_POPULATE_NON_LEADER_DATASTORE, FeatureGates
from epp.config.options import Options
from epp.server.server import EppServer
from epp.sync import ReplicaSyncService
from scheduler.config.resolved import ResolvedConfig

__all__ = ["PickerApp"]

_log = structlog.get_logger("epp")

GRPCIO_MISMATCH_NOTICE = (
    "ext_proc on grpc.aio: gRPC closes a client this port cannot serve before the picker sees it, and Envoy "
    "answers its client 500. On the TLS port gRPC logs its own 'Handshake failed' line without the peer "
    "(WRONG_VERSION_NUMBER: a plaintext client); on a plaintext port a TLS client is closed without a line. "
    "Compare tls here with the Envoy config (--picker-plaintext). The h2 engine (the default, also with "
    "--health-checking) explains each such connection and names the peer"
)


class _LeaderOnlyDataLayer:
    """Leadership target running the data layer only while leading (haPopulateNonLeaderDatastore=false)."""

    def __init__(self, server: EppServer, layer: DataLayer) -> None:
        self._server = server
        self._layer = layer

    async def set_leader(self, leader: bool) -> None:
        if leader:
            await self._layer.start()
            await self._server.set_leader(True)
        else:
            await self._server.set_leader(False)
            await self._layer.stop()


class PickerApp:
    """The assembled picker: servers, data layer, optional leader elector."""

    def __init__(
        self,
        options: Options,
        config: ResolvedConfig,
        layer: DataLayer,
        http: HttpClient,
        server: EppServer,
        kube_client: Any = None,
        objectives: InMemoryObjectiveStore | None = None,
        gates: FeatureGates | None = None,
        rewrites: RewriteStore | None = None,
        replica_sync: ReplicaSyncService | None = None,
    ) -> None:
        self.options = options
        self.rewrites = rewrites
        self.gates = gates or FeatureGates()
        self.config = config
        self.layer = layer
        self.server = server
        self._http = http
        self._kube = kube_client
        self.objectives = objectives
        self.replica_sync = replica_sync
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def leader_only_datalayer(self) -> bool:
        """True when the data layer runs only while leading (leader election + the gate off)."""
        populate = self.gates.enabled(HA_POPULATE_NON_LEADER_DATASTORE)
        return self.options.ha_enable_leader_election and not populate

    async def start(self) -> None:
        await self.server.start()
        if self.replica_sync is not None:
            try:
                await self.replica_sync.start()
            except OSError as exc:
                await self.server.shutdown()
                raise StartupError(f"--replica-sync-port {self.options.replica_sync_port}: {exc}") from None
        if not self.leader_only_datalayer:
            await self.layer.start()
        self._tasks.append(asyncio.create_task(self._ready_when_synced(), name="epp-ready"))
        if self.options.ha_enable_leader_election:
            self._tasks.append(asyncio.create_task(self._lead(), name="epp-leader-election"))
        o = self.options
        if self._kube is not None and self.objectives is not None and o.pool_name:
            from epp.kubernetes.crd_watch import ObjectiveWatch

            watch = ObjectiveWatch(self._kube, o.pool_namespace, o.pool_name, self.objectives)
            self._tasks.append(asyncio.create_task(watch.run(), name="epp-objectives-watch"))
        if self._kube is not None and self.rewrites is not None and o.pool_name:
            from epp.kubernetes.crd_watch import RewriteWatch

            rewrites = RewriteWatch(self._kube, o.pool_namespace, o.pool_name, self.rewrites, o.pool_group)
            self._tasks.append(asyncio.create_task(rewrites.run(), name="epp-rewrites-watch"))
        _log.info(
            "endpoint picker started",
            grpc_port=self.server.grpc_port,
            grpc_health_port=self.server.grpc_health_port,
            metrics_port=self.server.metrics_port,
            tls=o.secure_serving,
            discovery=o.discovery_mode,
            config=self.config.source,
        )
        if o.grpc_engine == "grpcio":  # grpc.aio accepts and closes such connections before Python sees them
            _log.info(GRPCIO_MISMATCH_NOTICE, engine="grpcio", tls=o.secure_serving)

    async def _ready_when_synced(self) -> None:
        await self.layer.wait_synced()
        snapshot = self.layer.snapshot
        if self.options.ready_requires_endpoint:
            message = "no endpoint has answered a scrape yet: not ready"
            count = await wait_for_an_answer(snapshot, _log, message)
            await self.server.set_synced(True)
            _log.info("endpoints synced: ready", endpoints=len(snapshot()), answered=count)
            return
        await self.server.set_synced(True)
        _log.info("endpoints synced: ready", endpoints=len(snapshot()), answered=answered(snapshot()))
        await wait_for_an_answer(snapshot, _log, "no endpoint has answered a scrape yet", interval=0.5)

    async def _lead(self) -> None:
        from epp.kubernetes.leader import run_leader_election

        target = _LeaderOnlyDataLayer(self.server, self.layer) if self.leader_only_datalayer else self.server
        try:
            await run_leader_election(self.options, target)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no Kubernetes API: stay live, never ready
            _log.error("leader election cannot run: this replica stays not ready", error=str(exc))

    async def stop(self) -> None:
        _log.info("shutting down", drain_timeout_seconds=self.options.drain_timeout)
        for task in self._tasks:  # first: a leader gives its lease up at once, as upstream
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.server.shutdown()
        if self.replica_sync is not None:
            await self.replica_sync.stop()
        await self.layer.stop()
        await self._http.aclose()
        if self._kube is not None:
            await self._kube.close()
        _log.info("stopped", completed_requests=self.server.servicer.completions)
