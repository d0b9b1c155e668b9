"""One poller per (endpoint, data source): fetch, extract, swap the endpoint's record.

Each poll: ``GET <scheme>://<host>:<port><path>`` with the layer's timeout and body cap (scheme and
port from the source's resolved :class:`~datalayer.connection.Connection`: a non-zero port replaces
the endpoint's, as ``metrics-data-source``'s ``port`` and ``--model-server-metrics-port`` do; with a
port, a source whose ``use_node_address`` is true scrapes the endpoint's ``node_address`` when known);
a non-2xx status, a transport failure (:class:`FetchError`) or an extraction ``ValueError`` is a failure. For
the primary source a success makes the endpoint HEALTHY and ready with the new metrics; a failure
makes it UNHEALTHY, not ready, with ``last_error`` set (metrics keep their old ``updated_at``, so their
age keeps growing). Secondary sources only merge attributes. Errors are logged on transitions only.

Scheduling: the first poll happens at once; later polls are spaced ``interval`` apart on a fixed
grid, offset per address (a hash) so that many pollers do not fire together; a poll that overruns
skips the missed ticks instead of bunching up.

Failures are also reported to ``on_error(source_type, extractor_type)`` (upstream's data-layer error
counters): a fetch failure or non-2xx status as a *poll* error (``extractor_type`` None); a body the
source could not turn into an update as an *extract* error of the source's extractor
(:data:`EXTRACTOR_TYPES`; upstream runs its extractors one by one, so their failures are not poll
errors).
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog

from datalayer.connection import Connection
from datalayer.discovery.base import split_address
from datalayer.http import FetchError, HttpClient
from datalayer.records import EndpointSpec, Health, frozen_mapping
from datalayer.sources import DataSource, SourceUpdate
from datalayer.store import EndpointStore

__all__ = ["EXTRACTOR_TYPES", "ErrorSink", "PollSettings", "SourcePoller"]

ErrorSink = Callable[[str, "str | None"], None]
# The extractor type upstream names for the extraction step of each built-in source.
EXTRACTOR_TYPES = {
    "metrics-data-source": "core-metrics-extractor",
    "models-data-source": "models-data-extractor",
    "dcgm-data-source": "dcgm-extractor",
}

log = structlog.get_logger("datalayer")


@dataclass(frozen=True, slots=True)
class PollSettings:
    refresh_interval: float
    timeout: float
    max_body_bytes: int
    scheme: str = "http"
    metrics_port: int = 0  # overrides the endpoint port for the primary source when non-zero


class SourcePoller:
    def __init__(
        self,
        address: str,
        source: DataSource,
        store: EndpointStore,
        specs: Mapping[str, EndpointSpec],
        http: HttpClient,
        settings: PollSettings,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        connection: Connection | None = None,
        on_error: ErrorSink | None = None,
    ) -> None:
        self.address = address
        self._on_error = on_error
        self.source = source
        self._store = store
        self._specs = specs
        self._http = http
        self._settings = settings
        self._clock = clock
        self._sleep = sleep
        self._failing = False
        if connection is None:  # the layer's settings: the metrics port applies to the primary source
            connection = Connection(settings.scheme, settings.metrics_port if source.primary else 0)
        self._connection = connection
        self._url_spec = specs.get(address)
        self.url = self._url_for(self._url_spec)

    def _url_for(self, spec: EndpointSpec | None) -> str:
        """The scrape URL for ``spec``: its ``metrics_host`` (else its address), or, when the source sets
        a port, the endpoint's host (the node's with ``useNodeAddress``) at that port, as upstream."""
        connection = self._connection
        if not connection.port and spec is not None and spec.metrics_host:
            host, port = split_address(spec.metrics_host)
        else:
            host, port = split_address(self.address)
            node = spec.node_address if spec is not None else ""
            if connection.port and node and getattr(self.source, "use_node_address", False):
                host = node  # dcgm-data-source's useNodeAddress (a DaemonSet exporter)
            port = connection.port or port
        host = f"[{host}]" if ":" in host else host
        return f"{connection.scheme}://{host}:{port}{self.source.path}"

    async def run(self) -> None:
        interval = self.source.interval(self._settings.refresh_interval)
        await self.poll_once()
        offset = (zlib.crc32(self.address.encode()) % 1000) / 1000.0 * interval
        next_at = self._clock() + offset
        while True:
            now = self._clock()
            if next_at > now:
                await self._sleep(next_at - now)
            await self.poll_once()
            next_at += interval
            now = self._clock()
            if next_at < now:
                next_at = now + (next_at - now) % interval

    async def poll_once(self) -> None:
        spec = self._specs.get(self.address)
        if spec is None:
            return
        if spec is not self._url_spec:  # an update may move the scrape target (metrics_host, node address)
            self._url_spec, self.url = spec, self._url_for(spec)
        s = self._settings
        source_type = getattr(self.source, "plugin_type", type(self.source).__name__)
        fetched = False
        try:
            resp = await self._http.get(self.url, timeout=s.timeout, max_bytes=s.max_body_bytes)
            if not 200 <= resp.status < 300:
                raise FetchError(f"HTTP {resp.status}")
            fetched = True
            update = self.source.extract(resp.body, spec, self._clock())
        except (FetchError, ValueError) as exc:
            self._report(source_type, EXTRACTOR_TYPES.get(source_type, source_type) if fetched else None)
            self._failed(f"{self.source.path}: {exc}")
            return
        except Exception as exc:  # a plugin bug must not kill the poller
            self._report(source_type, EXTRACTOR_TYPES.get(source_type, source_type) if fetched else None)
            if not self._failing:
                log.exception("data source crashed", source=self.source.name, address=self.address)
            self._failed(f"{self.source.path}: {self.source.name} crashed: {type(exc).__name__}: {exc}")
            return
        self._succeeded(update)

    def _report(self, source_type: str, extractor_type: str | None) -> None:
        if self._on_error is not None:
            try:
                self._on_error(source_type, extractor_type)
            except Exception:
                log.exception("data-layer error sink failed")

    def _succeeded(self, update: SourceUpdate) -> None:
        record = self._store.get(self.address)
        if record is None:
            return
        changes: dict[str, Any] = {}
        if update.attributes:
            changes["attributes"] = frozen_mapping({**record.attributes, **update.attributes})
        if self.source.primary and update.metrics is not None:
            changes.update(metrics=update.metrics, ready=True, health=Health.HEALTHY, last_error=None)
            if record.health is Health.UNKNOWN:
                log.debug("endpoint healthy", endpoint=record.name, address=self.address)
            elif record.health is not Health.HEALTHY:
                log.info(
                    "endpoint healthy again",
                    endpoint=record.name,
                    address=self.address,
                    was=record.health.value,
                )
        elif self._failing:
            log.info(
                "data source recovered", endpoint=record.name, address=self.address, source=self.source.name
            )
        self._failing = False
        if changes:
            self._store.replace(replace(record, **changes))

    def _failed(self, error: str) -> None:
        record = self._store.get(self.address)
        if record is None:
            return
        # Transitions only: the primary source's transition is the record's health changing (so it
        # holds across poller restarts); a secondary source remembers its own state.
        first = record.health is not Health.UNHEALTHY if self.source.primary else not self._failing
        if first:
            log.warning(
                "endpoint scrape failed",
                endpoint=record.name,
                address=self.address,
                source=self.source.name,
                error=error,
            )
        self._failing = True
        if self.source.primary and (record.health is not Health.UNHEALTHY or record.last_error != error):
            self._store.replace(replace(record, ready=False, health=Health.UNHEALTHY, last_error=error))
