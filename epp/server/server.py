"""The running picker: ext_proc + health gRPC servers and the HTTP metrics/debug port, as one object.

:class:`EppServer` is assembled from finished parts (endpoint source, admitter, scheduler, session
config), so the CLI (:mod:`epp.app`) and the tests build it the same way, the tests with fakes.

The ext_proc port is served by one of three engines (``ServerSettings.engine``): ``"grpcio"`` (grpc.aio,
:mod:`epp.server.servicer`), ``"h2"`` (:mod:`epp.server.h2`) or ``"ngh2"`` (:mod:`epp.server.ngh2`, libnghttp2
under the h2 engine's listener); all drive the same
:class:`~epp.server.stream.ExtProcStream`. Health is always a grpc.aio server on its own port.

Lifecycle: ``await start()`` binds every port (health: not ready until synced); ``await
set_synced(True)`` once the data layer has its first complete view (ready); ``await shutdown()``
turns health NOT_SERVING, stops accepting streams, lets in-flight streams finish for up to
``shutdown_grace`` seconds, then cancels the rest (their completions carry outcome SHUTDOWN), and
closes the HTTP port last so the final metrics can still be scraped during the grace period.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from prometheus_client import CollectorRegistry

from epp.admission import Admitter
from epp.flowcontrol.controller import FlowController
from epp.protocol import SessionConfig
from epp.server.decisions import DecisionLog
from epp.server.grpc_server import start_ext_proc_server, start_health_server
from epp.server.h2 import H2Server
from epp.server.h2.connection import H2Connection
from epp.server.h2.limits import H2Limits
from epp.server.health import HealthStatus
from epp.server.http import MetricsTls, make_http_app, start_http
from epp.server.latency_sidecar import LatencySidecarClient
from epp.server.metrics import RequestMetrics, StreamMetrics
from epp.server.prescheduling import chain
from epp.server.render import token_renderer
from epp.server.request_log import RequestLog
from epp.server.routing import EndpointSource, RequestScheduler, Router
from epp.server.servicer import ExtProcServicer
from epp.server.stream import StreamCore
from epp.server.tls import CertDir, CertPair
from scheduler.interfaces import StateDumper
from scheduler.types import LLMRequest, SchedulingResult

__all__ = ["EppServer", "ServerSettings"]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Network and diagnostics settings (ports 0 = any free port)."""

    host: str = "127.0.0.1"
    grpc_port: int = 9002
    grpc_health_port: int = 9003
    metrics_port: int = 9090
    credentials: grpc.ServerCredentials | None = None  # grpcio engine: None = plaintext
    certificate: CertPair | None = None  # h2 engine: None = plaintext (grpcio: for information)
    reload_from: CertDir | None = None  # h2 engine: re-read on change (grpcio reloads via credentials)
    client_ca: bytes | None = None  # h2 engine: PEM CA clients must present a cert of (grpcio: credentials)
    engine: str = "grpcio"  # "grpcio" (grpc.aio), "h2" (epp.server.h2) or "ngh2"; the CLI defaults to h2
    max_body_bytes: int = 16 * 1024 * 1024
    health_on_ext_proc_port: bool = False
    leader_election: bool = False
    shutdown_grace: float = 30.0  # --drain-timeout
    max_recv_bytes: int = 0  # --grpc-max-recv-msg-size (0: max_body_bytes + 1 MiB)
    max_send_bytes: int = 0  # --grpc-max-send-msg-size (0: no limit)
    tls_min_version: str | None = None  # h2 engine (Go name)
    tls_cipher_suites: tuple[str, ...] = ()  # h2 engine (Go names)
    h2_limits: H2Limits = field(default_factory=H2Limits)  # h2 engine: streams, windows, budget, floods
    metrics_tls: MetricsTls | None = None  # --metrics-cert-dir: HTTPS on the metrics port (reloaded)
    verbosity: int = 1
    tracing: bool = True
    metrics_token: str | None = None
    decisions_capacity: int = 256
    reuse_port: bool = False


def _ngh2_connection() -> Any:
    """The ngh2 engine's connection class, imported only when that engine is chosen (ngh2 is an optional
    dependency: ``pip install 'pyepp[ngh2]'``; the options check it is installed, see
    :func:`epp.config.options.parse_options`)."""
    from epp.server.ngh2 import NgH2Connection

    return NgH2Connection


def plugin_states(plugins: Any) -> dict[str, Any]:
    """``{name: dump_state()}`` of the plugins that report a state (``/debug/plugins/state``)."""
    return {p.name: p.dump_state() for p in plugins if isinstance(p, StateDumper)}


class EppServer:
    def __init__(
        self,
        settings: ServerSettings,
        *,
        source: EndpointSource,
        admitter: Admitter,
        scheduler: RequestScheduler,
        session_config: SessionConfig,
        registry: CollectorRegistry,
        request_metrics: RequestMetrics,
        config_view: Callable[[], Mapping[str, Any]] = dict,
        clock: Callable[[], float] = time.perf_counter,
        monotonic: Callable[[], float] = time.monotonic,
        on_result: Callable[[LLMRequest, SchedulingResult], None] | None = None,
        stream_metrics: StreamMetrics | None = None,
        flow: FlowController | None = None,
        latency_sidecar: LatencySidecarClient | None = None,
    ) -> None:
        """``flow``: the flow controller (None: flow control off); shut down first by :meth:`shutdown`,
        so queued requests are answered (503) before the streams' grace period. ``latency_sidecar``:
        ``predicted-latency-producer``'s client of the latency predictor servers (None: not used)."""
        self.settings = settings
        self.source = source
        self.registry = registry
        self.decisions = DecisionLog(settings.decisions_capacity)
        self.health = HealthStatus(leader_election=settings.leader_election)
        router = Router(source, admitter, scheduler, request_metrics, self.decisions, clock, on_result)
        request_log = (
            RequestLog(settings.verbosity, tracing=settings.tracing) if settings.verbosity >= 2 else None
        )
        self.core = StreamCore(
            session_config,
            router,
            request_metrics,
            request_log,
            clock,
            stream_metrics=stream_metrics,
            renderer=chain(token_renderer(getattr(scheduler, "plugins", ())), latency_sidecar),
            flow=flow,
        )
        self._latency_sidecar = latency_sidecar
        self.servicer = ExtProcServicer(self.core, settings.max_send_bytes)
        self._http_app = make_http_app(
            registry,
            snapshot=source.snapshot,
            decisions=self.decisions,
            config=config_view,
            plugin_state=lambda: plugin_states(getattr(scheduler, "plugins", ())),
            token=settings.metrics_token,
            clock=monotonic,
        )
        self._ext_proc: grpc.aio.Server | H2Server | None = None
        self._health_server: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self._cert_watch: asyncio.Task[None] | None = None
        self.grpc_port = 0
        self.grpc_health_port = 0
        self.metrics_port = 0

    async def start(self) -> None:
        """Bind every port (ports given as 0 are resolved into the attributes); health: not ready."""
        s = self.settings
        await self.health.start()
        if self._latency_sidecar is not None:
            self._latency_sidecar.start()
        context = s.metrics_tls.context if s.metrics_tls is not None else None
        self._http, self.metrics_port = await start_http(self._http_app, s.host, s.metrics_port, context)
        if s.metrics_tls is not None:
            self._cert_watch = asyncio.create_task(s.metrics_tls.watch(), name="epp-metrics-cert-reload")
        try:
            self._health_server, self.grpc_health_port = await start_health_server(
                self.health, host=s.host, port=s.grpc_health_port
            )
            if s.engine in ("h2", "ngh2"):
                h2 = H2Server(
                    self.core,
                    max_message_bytes=s.max_recv_bytes or s.max_body_bytes + 1024 * 1024,
                    certificate=s.certificate,
                    reload_from=s.reload_from,
                    max_send_bytes=s.max_send_bytes,
                    tls_min_version=s.tls_min_version,
                    tls_cipher_suites=s.tls_cipher_suites,
                    client_ca=s.client_ca,
                    limits=s.h2_limits,
                    health=self.health if s.health_on_ext_proc_port else None,
                    connection=_ngh2_connection() if s.engine == "ngh2" else H2Connection,
                )
                self._ext_proc = h2
                self.grpc_port = await h2.start(s.host, s.grpc_port)
            else:
                self._ext_proc, self.grpc_port = await start_ext_proc_server(
                    self.servicer,
                    self.health if s.health_on_ext_proc_port else None,
                    host=s.host,
                    port=s.grpc_port,
                    credentials=s.credentials,
                    max_body_bytes=s.max_body_bytes,
                    reuse_port=s.reuse_port,
                    max_recv_bytes=s.max_recv_bytes,
                    max_send_bytes=s.max_send_bytes,
                    limits=s.h2_limits,
                )
        except BaseException:
            await self.shutdown(grace=0)
            raise

    async def set_synced(self, synced: bool) -> None:
        await self.health.set_synced(synced)

    async def set_leader(self, leader: bool) -> None:
        await self.health.set_leader(leader)

    async def shutdown(self, grace: float | None = None) -> None:
        """Graceful stop (idempotent); ``grace`` defaults to the settings' ``shutdown_grace``."""
        await self.health.shutting_down()
        grace = self.settings.shutdown_grace if grace is None else grace
        if self._health_server is not None:
            health, self._health_server = self._health_server, None
            await health.stop(None)
        if self.core.flow is not None:
            self.core.flow.close()
        if self._ext_proc is not None:
            ext_proc, self._ext_proc = self._ext_proc, None
            self.servicer.shutting_down = True
            await ext_proc.stop(grace)
        if self._cert_watch is not None:
            self._cert_watch.cancel()
            self._cert_watch = None
        if self._http is not None:
            runner, self._http = self._http, None
            await runner.cleanup()
        if self.core.renderer is not None:
            await self.core.renderer.aclose()
