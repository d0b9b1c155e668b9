"""The ZMQ transport of vLLM KV events for ``precise-prefix-cache-producer`` / ``-scorer``.

A :class:`KVEventFeed` serves one such plugin (a :class:`KVEventSink`); its ``kvEventsConfig`` picks
the mode, as llm-d's:

* **per endpoint** (``discoverPods``, the default): for every endpoint of the pool, a SUB socket
  connects to ``tcp://<endpoint IP>:<podDiscoveryConfig.socketPort>`` (vLLM's
  ``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint":
  "tcp://*:5557"}'``); its events are filed under the endpoint's address. Endpoint lifecycle comes
  from the data layer's endpoint notifications: the plugin is an extractor of an
  ``endpoint-notification-source`` (configured, or added here when the configuration has none for it);
  a removed endpoint's socket is closed and its blocks dropped;
* **central** (``zmqEndpoint`` set, e.g. ``tcp://*:5557``): one SUB socket is *bound* there and the
  servers connect to it (vLLM's ``endpoint: tcp://<picker>:5557``); each message is filed under the
  ``<id>`` of its topic ``kv@<id>@<model>`` (vLLM's ``topic``; llm-d's guides set
  ``kv@$(POD_IP)@<model>``, ``epp-sim`` uses ``kv@<ip>:<port>@<model>``). Messages whose topic has no id
  are counted (``unattributed``) and dropped.

Both subscribe to ``topicFilter`` (default ``kv@``). Messages are ``[topic, seq (8 bytes big-endian),
msgpack payload]``; each is queued on the feed's :class:`~datalayer.kv_event_pool.KVEventPool`
(``concurrency`` ordered shards; one publisher's messages always on the same shard), whose workers
unpack it and apply it with the plugin's ingester (sequence gaps, restarts and malformed batches are
handled there). ZMQ reconnects by itself; a socket that fails (a ``connect``, ``bind`` or ``recv``
error, counted per subscriber and operation) is closed and opened again after
:data:`RETRY_INTERVAL` (counted as a reconnection). A publisher that restarts starts its sequence
again, which drops the blocks it held. Memory: each socket queues at most ``RECV_HWM`` (10,000)
messages before ZMQ drops further ones, each pool shard at most ``SHARD_BUDGET`` (both seen as a
sequence gap). ``pyzmq`` and ``msgpack`` are imported when a feed starts; without them start-up fails
with an error naming them.

``podDiscoveryConfig.podNamespace`` must be empty or the pool's namespace (:func:`kv_event_sources`
raises a ConfigError otherwise); ``podLabelSelector`` is applied by the plugin (it subscribes only the
endpoints whose labels match). The feed's figures (:meth:`KVEventFeed.stats`) are exported on
``/metrics`` under llm-d's ``kv_cache_events_*`` / ``kv_cache_index_*`` names
(:mod:`epp.server.kv_cache_metrics`); with ``enableMetrics`` and a ``metricsLoggingInterval`` they are
also logged that often.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import structlog

from datalayer.kv_event_pool import SLICE, KVEventPool
from datalayer.notifications import EndpointNotificationSource
from scheduler.errors import ConfigError
from scheduler.params import plugin_location

__all__ = [
    "CENTRAL",
    "RECV_HWM",
    "RETRY_INTERVAL",
    "KVEventFeed",
    "KVEventSink",
    "feed_stats",
    "kv_event_sources",
    "topic_source",
]

RECV_HWM = 10_000
RETRY_INTERVAL = 1.0  # seconds before a failed socket is opened again
CENTRAL = "local-subscriber"  # the central socket's subscriber id in the per-subscriber figures (llm-d's)
log = structlog.get_logger("datalayer.kv_events")


@runtime_checkable
class KVEventSink(Protocol):
    """What a precise prefix plugin offers its transport (see ``scheduler.plugins.precise.producer``)."""

    name: str
    plugin_type: str
    settings: Any  # PreciseParams: ``.events`` (KVEventsSettings), ``.enable_metrics``, ...
    ingester: Any  # KVEventIngester: ``ingest(source, seq, batch)``, counters

    def attach_transport(self, transport: Any) -> None: ...

    def extract_endpoint(self, event: Any) -> None: ...


def topic_source(topic: bytes) -> str:
    """The ``<id>`` of a ``kv@<id>@<model>`` topic ("" when the topic has none)."""
    parts = topic.decode(errors="replace").split("@")
    return parts[1] if len(parts) >= 3 else ""


class KVEventFeed(EndpointNotificationSource):
    """ZMQ sockets for one plugin (an endpoint-notification source: it follows the pool's endpoints)."""

    plugin_type = "kv-events-feed"

    def __init__(self, sink: KVEventSink, *, follow_endpoints: bool) -> None:
        super().__init__(f"kv-events/{sink.name}", [sink] if follow_endpoints else [])
        self.sink = sink
        self.events = sink.settings.events
        self.unattributed = 0
        self.received: dict[str, int] = {}  # subscriber id -> messages (bounded by the subscriptions)
        self.errors: dict[tuple[str, str], int] = {}  # (subscriber id, operation) -> ZMQ errors
        self.reconnections: dict[str, int] = {}
        self.pool: KVEventPool | None = None
        self._wanted: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._central: asyncio.Task[None] | None = None
        self._logger: asyncio.Task[None] | None = None
        self._running = False
        self._zmq: Any = None
        sink.attach_transport(self)

    # -- EndpointTransport -----------------------------------------------------------------------------

    def endpoint_added(self, address: str) -> None:
        if self.events.zmq_endpoint or not self.events.discover_pods:
            return
        self._wanted.add(address)
        if self._running and address not in self._tasks:
            self._tasks[address] = asyncio.create_task(self._subscribe(address), name=f"kv-events {address}")

    def endpoint_removed(self, address: str) -> None:
        self._wanted.discard(address)
        task = self._tasks.pop(address, None)
        if task is not None:
            task.cancel()
        self.received.pop(address, None)  # its series go with it, as upstream's CleanupSubscriber
        self.reconnections.pop(address, None)
        for key in [k for k in self.errors if k[0] == address]:
            del self.errors[key]

    def subscribed(self) -> list[str]:
        return sorted(self._tasks)

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._running:
            return
        try:
            import msgpack
            import zmq
            import zmq.asyncio
        except ImportError as exc:  # pragma: no cover - both are installed with the project's extras
            raise RuntimeError(f"KV events need the pyzmq and msgpack packages: {exc}") from None
        self._zmq = zmq
        unpackb = msgpack.unpackb

        def unpack(payload: bytes) -> Any:
            return unpackb(payload, raw=False, strict_map_key=False)

        def malformed() -> None:
            self.sink.ingester.malformed += 1

        self.pool = KVEventPool(self.events.concurrency, self.sink.ingester.ingest, unpack, malformed)
        self._running = True
        if self.events.zmq_endpoint:
            sock = self._socket()
            try:
                sock.bind(self.events.zmq_endpoint)
            except zmq.ZMQError as exc:
                sock.close(linger=0)
                self._running = False
                raise RuntimeError(f"kvEventsConfig.zmqEndpoint {self.events.zmq_endpoint}: {exc}") from None
            self._central = asyncio.create_task(self._run_central(sock), name="kv-events central")
        self.pool.start()
        for address in sorted(self._wanted):
            self.endpoint_added(address)
        settings = self.sink.settings
        if settings.enable_metrics and settings.metrics_logging_interval > 0:
            self._logger = asyncio.create_task(
                self._log_every(settings.metrics_logging_interval), name="kv-events stats"
            )

    async def stop(self) -> None:
        self._running = False
        tasks = [t for t in (*self._tasks.values(), self._central, self._logger) if t is not None]
        self._tasks.clear()
        self._central = self._logger = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.pool is not None:
            await self.pool.stop()

    # -- receiving -------------------------------------------------------------------------------------

    def _socket(self) -> Any:
        zmq = self._zmq
        sock = zmq.asyncio.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, RECV_HWM)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, self.events.topic_filter.encode())
        return sock

    def _error(self, who: str, operation: str) -> None:
        key = (who, operation)
        self.errors[key] = self.errors.get(key, 0) + 1

    async def _subscribe(self, address: str) -> None:
        """Connect to ``address``'s publisher; after a failure, wait and connect a fresh socket."""
        zmq = self._zmq
        host = address.rpartition(":")[0] or address
        while True:
            sock = self._socket()
            try:
                sock.connect(f"tcp://{host}:{self.events.socket_port}")
            except zmq.ZMQError:
                self._error(address, "connect")
                sock.close(linger=0)
            else:
                await self._receive(sock, address)
            await asyncio.sleep(RETRY_INTERVAL)
            self.reconnections[address] = self.reconnections.get(address, 0) + 1

    async def _run_central(self, sock: Any) -> None:
        """Receive on the bound central socket; after a failure, wait and bind a fresh one."""
        zmq = self._zmq
        while True:
            if sock is not None:
                await self._receive(sock, None)
            await asyncio.sleep(RETRY_INTERVAL)
            self.reconnections[CENTRAL] = self.reconnections.get(CENTRAL, 0) + 1
            sock = self._socket()
            try:
                sock.bind(self.events.zmq_endpoint)
            except zmq.ZMQError:
                self._error(CENTRAL, "bind")
                sock.close(linger=0)
                sock = None

    async def _receive(self, sock: Any, source: str | None) -> None:
        """Queue the socket's messages on the pool until a ZMQ error (counted; the socket is closed)."""
        pool = self.pool
        assert pool is not None
        zmq_error = self._zmq.ZMQError
        label = source if source is not None else CENTRAL
        received = self.received
        clock = time.perf_counter
        turn = clock()
        try:
            while True:
                try:
                    frames = await sock.recv_multipart()
                except zmq_error:
                    self._error(label, "recv")
                    return
                received[label] = received.get(label, 0) + 1
                if len(frames) != 3 or len(frames[1]) != 8:
                    self.sink.ingester.malformed += 1
                    continue
                topic, seq, payload = frames
                who = source if source is not None else topic_source(topic)
                if not who:
                    self.unattributed += 1
                    continue
                pool.add(who, int.from_bytes(seq, "big"), payload)
                if clock() - turn >= SLICE:  # a backlog is read in turns with the workers and requests
                    await asyncio.sleep(0)
                    turn = clock()
        finally:
            sock.close(linger=0)

    def stats(self) -> dict[str, int]:
        ing = self.sink.ingester
        pool = self.pool
        return {
            "subscriptions": len(self._tasks) + (1 if self._central is not None else 0),
            "concurrency": self.events.concurrency,
            "queue_depth": pool.depth() if pool is not None else 0,
            "queue_drops": pool.queue_drops if pool is not None else 0,
            "index_entries": ing.index.size(),
            "batches": ing.batches,
            "events": ing.events,
            "missed_batches": ing.missed_batches,
            "restarts": ing.restarts,
            "malformed": ing.malformed,
            "unattributed": self.unattributed,
            "hash_checks": ing.hash_checks,
            "hash_mismatches": ing.hash_mismatches,
            "overflow_resets": ing.index.overflow_resets,
            "admissions": ing.admitted,
            "evictions": ing.evicted,
        }

    async def _log_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            log.info("kv-block index", plugin=self.sink.name, **self.stats())


def kv_event_sources(
    plugins: Sequence[object], configured: Sequence[EndpointNotificationSource], namespace: str = ""
) -> list[EndpointNotificationSource]:
    """``configured`` plus one :class:`KVEventFeed` per KV-event plugin. A feed forwards endpoint
    events to its plugin only when no configured source lists the plugin as an extractor already.

    ``namespace`` is the pool's: a plugin whose ``podDiscoveryConfig.podNamespace`` names another one
    would subscribe none of the pool's endpoints, a ConfigError naming the plugin and the field."""
    wired = {id(x) for s in configured for x in s.extractors}
    sinks = [p for p in plugins if isinstance(p, KVEventSink) and hasattr(p.settings, "events")]
    for sink in sinks:
        events = sink.settings.events
        wanted = events.pod_namespace
        per_endpoint = events.discover_pods and not events.zmq_endpoint
        if wanted and namespace and wanted != namespace and per_endpoint:
            raise ConfigError(
                f"{wanted!r} is not the pool's namespace {namespace!r}: the picker's endpoints all live "
                "in the pool's namespace, so none would be subscribed (leave it empty or set the pool's)",
                location=f"{plugin_location(sink.plugin_type, sink.name)}: "
                "parameters.kvEventsConfig.podDiscoveryConfig.podNamespace",
            )
    feeds = [KVEventFeed(sink, follow_endpoints=id(sink) not in wired) for sink in sinks]
    return [*configured, *feeds]


def feed_stats(sources: Sequence[object]) -> Mapping[str, Mapping[str, int]]:
    """``{plugin name: stats}`` of the KV-event feeds among ``sources``."""
    return {s.sink.name: s.stats() for s in sources if isinstance(s, KVEventFeed)}
