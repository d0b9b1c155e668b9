"""The data layer: discovery + one poller per (endpoint, source) + staleness sweeps + the snapshot.

Lifecycle: ``await start()`` launches the discovery task, the staleness sweeper and (as endpoints
appear) the pollers, all on the running loop; ``await stop()`` cancels and awaits them all (it does not
close the injected HTTP client: its owner does). Everything runs on one event loop; ``snapshot()`` may
also be called from other threads (it only reads an immutable tuple or builds one from a dict that is
never resized in place).

Connections: each source's :class:`~datalayer.connection.SourceConnection` is resolved against the
options (``scheme``, ``insecure_skip_verify``, ``metrics_port`` for the primary source) at construction,
where TLS material is read (:class:`~datalayer.connection.TlsSettingsError` for a bad file). Sources on
the options' own connection share the injected client; the others get clients of their own, created
when their pollers start and closed by ``stop()``.

Without metrics (no primary source among ``sources``, e.g. ``dataLayer: {injectDefaults: false}``), as
upstream runs then: an endpoint is ready as soon as discovery adds it (health UNKNOWN, empty metrics,
so scorers that read metrics see zeros) and never turns stale; construction logs that once.

Endpoint lifecycle events (``endpoint_sources``, see :mod:`datalayer.notifications`): each applied
discovery batch notifies removals (with the endpoint's last spec), then additions and changes.

Staleness: a sweeper runs every ``min(threshold / 4, 0.25 s)`` and turns HEALTHY endpoints whose last
good scrape is older than ``staleness_threshold`` into STALE (not ready). A poll failure makes an
endpoint UNHEALTHY at once; the next good scrape makes it HEALTHY again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import structlog

from datalayer.aggregates import PoolAggregates, pool_aggregates
from datalayer.connection import Connection, HttpClients, TlsSettings
from datalayer.discovery.base import Discovery
from datalayer.engines import BUILTIN_ENGINES, EngineMapping
from datalayer.http import HttpClient
from datalayer.notifications import EndpointEvent, EndpointEventType, EndpointNotificationSource
from datalayer.poller import ErrorSink, PollSettings, SourcePoller
from datalayer.records import DiscoveryEvent, EndpointRecord, EndpointSpec, Health
from datalayer.sources import CoreMetricsExtractor, DataSource, MetricsDataSource, ModelsDataSource
from datalayer.store import EndpointStore

__all__ = ["DataLayer", "DataLayerOptions", "RemovalCallback"]

log = structlog.get_logger("datalayer")

RemovalCallback = Callable[[frozenset[str]], None]


def _builtin_engines() -> Mapping[str, EngineMapping]:
    return BUILTIN_ENGINES


@dataclass(frozen=True, slots=True)
class DataLayerOptions:
    """Scraping settings (flag names in parentheses)."""

    refresh_interval: float = 0.05  # --refresh-metrics-interval
    staleness_threshold: float = 2.0  # --metrics-staleness-threshold
    timeout: float = 1.0
    max_body_bytes: int = 4 * 1024 * 1024
    models_interval: float = 5.0
    scheme: str = "http"  # --model-server-metrics-scheme
    metrics_path: str = "/metrics"  # --model-server-metrics-path
    metrics_port: int = 0  # --model-server-metrics-port (0: the endpoint's port)
    insecure_skip_verify: bool = True  # --model-server-metrics-https-insecure-skip-verify
    engines: Mapping[str, EngineMapping] = field(default_factory=_builtin_engines)

    def __post_init__(self) -> None:
        for name in ("refresh_interval", "staleness_threshold", "timeout", "models_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DataLayerOptions.{name}: expected a positive number of seconds")
        if self.max_body_bytes <= 0:
            raise ValueError("DataLayerOptions.max_body_bytes: expected a positive byte count")
        if self.scheme not in ("http", "https"):
            raise ValueError(f"DataLayerOptions.scheme: expected http or https, got {self.scheme!r}")
        if not self.metrics_path.startswith("/"):
            raise ValueError(
                f"DataLayerOptions.metrics_path: expected a path starting with '/', got {self.metrics_path!r}"
            )

    def default_sources(self) -> tuple[DataSource, ...]:
        metrics = MetricsDataSource(
            extractors=[CoreMetricsExtractor(engines=self.engines)], path=self.metrics_path
        )
        return (metrics, ModelsDataSource(interval=self.models_interval))


class DataLayer:
    def __init__(
        self,
        discovery: Discovery,
        *,
        http: HttpClient,
        options: DataLayerOptions | None = None,
        sources: Sequence[DataSource] | None = None,
        endpoint_sources: Sequence[EndpointNotificationSource] = (),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.options = options or DataLayerOptions()
        self.discovery = discovery
        self.sources = tuple(sources) if sources is not None else self.options.default_sources()
        self.endpoint_sources = tuple(endpoint_sources)
        self._http = http
        self._clock = clock
        self._sleep = sleep
        self.collects_metrics = any(source.primary for source in self.sources)
        self._store = EndpointStore(ready_on_add=not self.collects_metrics)
        self._specs: dict[str, EndpointSpec] = {}
        self._pollers: dict[str, list[asyncio.Task[None]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._removal_callbacks: list[RemovalCallback] = []
        self._error_callbacks: list[ErrorSink] = []
        self._synced = asyncio.Event()
        self._running = False
        o = self.options
        self._settings = PollSettings(
            o.refresh_interval, o.timeout, o.max_body_bytes, o.scheme, o.metrics_port
        )
        default = Connection(o.scheme, 0, TlsSettings(o.insecure_skip_verify))
        self._clients = HttpClients(http, default)
        self._connections: list[Connection] = []  # one per source, in order
        if not self.collects_metrics:
            log.warning(
                "no metrics data source: endpoints are taken as ready when discovered, without metrics "
                "(metric-based scorers see zeros; no staleness)",
                sources=[source.name for source in self.sources],
            )
        for source in self.sources:
            port_default = Connection(default.scheme, o.metrics_port if source.primary else 0, default.tls)
            connection = source.connection.resolve(port_default)
            if connection.scheme == "https" and connection.client_key != default.client_key:
                connection.tls.ssl_context()  # read the TLS files now: fail at startup, not per poll
            self._connections.append(connection)
            every = source.interval(o.refresh_interval)
            if source.primary and every > o.staleness_threshold:
                log.warning(
                    "metrics source interval exceeds the staleness threshold: endpoints turn stale "
                    "(not ready) between scrapes",
                    source=source.name,
                    interval_s=every,
                    staleness_threshold_s=o.staleness_threshold,
                )

    # -- public API ---------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """True once discovery has applied its first complete listing."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def snapshot(self) -> tuple[EndpointRecord, ...]:
        """Every known endpoint (ready or not), immutable; the same object until something changes."""
        return self._store.snapshot()

    def get(self, address: str) -> EndpointRecord | None:
        return self._store.get(address)

    def now(self) -> float:
        """The layer's clock (the clock of ``metrics.updated_at``)."""
        return self._clock()

    def aggregates(self) -> PoolAggregates:
        """Pool averages over fresh endpoints (see :mod:`datalayer.aggregates`)."""
        return pool_aggregates(self._store.snapshot(), self._clock(), self.options.staleness_threshold)

    def on_poll_error(self, callback: ErrorSink) -> None:
        """Call ``callback(source_type, extractor_type)`` on every failed poll (``extractor_type`` None:
        the fetch failed; else the extraction did)."""
        self._error_callbacks.append(callback)

    def _report_error(self, source_type: str, extractor_type: str | None) -> None:
        for callback in self._error_callbacks:
            callback(source_type, extractor_type)

    def on_endpoints_removed(self, callback: RemovalCallback) -> Callable[[], None]:
        """Call ``callback(addresses)`` after endpoints leave; returns an unsubscribe function."""
        self._removal_callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._removal_callbacks.remove(callback)

        return unsubscribe

    async def start(self) -> None:
        if self._running:
            return
        self._running = True
        for source in self.endpoint_sources:  # sources with I/O of their own (KV-event feeds)
            start = getattr(source, "start", None)
            if start is not None:
                await start()
        self._tasks.append(asyncio.create_task(self._run_discovery(), name="datalayer-discovery"))
        self._tasks.append(asyncio.create_task(self._sweep_forever(), name="datalayer-staleness"))
        for address in self._specs:
            self._start_pollers(address)

    async def stop(self) -> None:
        self._running = False
        tasks = self._tasks + [t for ts in self._pollers.values() for t in ts]
        self._tasks = []
        self._pollers = {}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for source in self.endpoint_sources:
            stop = getattr(source, "stop", None)
            if stop is not None:
                await stop()
        await self._clients.aclose()

    # -- discovery sink -----------------------------------------------------------------------------

    def apply(self, events: Sequence[DiscoveryEvent]) -> None:
        added, updated, removed = self._store.apply(events)
        for address in removed:  # before additions: a batch may remove and re-add an address
            last = self._specs.pop(address, None)
            for task in self._pollers.pop(address, ()):
                task.cancel()
            if last is not None:
                self._notify(EndpointEventType.DELETE, last)
        for spec in (*added, *updated):
            self._specs[spec.address] = spec
            self._notify(EndpointEventType.ADD_OR_UPDATE, spec)
        if self._running:
            for spec in added:
                self._start_pollers(spec.address)
        if added or updated or removed:
            log.info("endpoints changed", added=len(added), updated=len(updated), removed=len(removed))
        gone = frozenset(a for a in removed if self._store.get(a) is None)
        if gone:
            for callback in list(self._removal_callbacks):
                try:
                    callback(gone)
                except Exception:
                    log.exception("endpoint removal callback failed", callback=repr(callback))

    def _notify(self, kind: EndpointEventType, spec: EndpointSpec) -> None:
        event = EndpointEvent(kind, spec)
        for source in self.endpoint_sources:
            source.notify(event)

    def current(self) -> Mapping[str, EndpointSpec]:
        return dict(self._specs)

    def mark_synced(self) -> None:
        if not self._synced.is_set():
            log.info("endpoint discovery synced", endpoints=len(self._store))
            self._synced.set()

    # -- internals ----------------------------------------------------------------------------------

    def _start_pollers(self, address: str) -> None:
        self._pollers[address] = [
            asyncio.create_task(
                SourcePoller(
                    address,
                    source,
                    self._store,
                    self._specs,
                    self._clients.client_for(connection),
                    self._settings,
                    self._clock,
                    self._sleep,
                    connection,
                    self._report_error,
                ).run(),
                name=f"datalayer-poll-{source.name}-{address}",
            )
            for source, connection in zip(self.sources, self._connections, strict=True)
        ]

    async def _run_discovery(self) -> None:
        backoff = 0.5
        while True:
            try:
                await self.discovery.run(self)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("endpoint discovery crashed; restarting", retry_in=backoff)
                await self._sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    def sweep(self) -> None:
        """Mark HEALTHY endpoints whose last good scrape is older than the threshold as STALE."""
        now = self._clock()
        threshold = self.options.staleness_threshold
        for record in self._store.snapshot():
            if record.health is Health.HEALTHY and record.is_stale(now, threshold):
                age = record.age(now)
                log.warning(
                    "endpoint metrics stale",
                    endpoint=record.name,
                    address=record.address,
                    age_s=round(age, 3),
                )
                error = f"no good scrape for {age:.2f}s"
                stale = replace(record, ready=False, health=Health.STALE, last_error=error)
                self._store.replace(stale)

    async def _sweep_forever(self) -> None:
        period = min(self.options.staleness_threshold / 4, 0.25)
        while True:
            await self._sleep(period)
            self.sweep()
