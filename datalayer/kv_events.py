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
msgpack payload]``; the payload is unpacked here and applied by the plugin's ingester (sequence gaps,
restarts and malformed batches are handled there). ZMQ reconnects by itself; a publisher that restarts
starts its sequence again, which drops the blocks it held. Memory: each socket queues at most
``RECV_HWM`` (10,000) messages before ZMQ drops further ones (seen as a sequence gap). ``pyzmq`` and
``msgpack`` are imported when a feed starts; without them start-up fails with an error naming them.

With ``indexerConfig.kvBlockIndexConfig.enableMetrics`` the feed logs the index figures (entries,
batches, events, gaps, restarts, malformed, unattributed, hash checks and mismatches, overflow resets)
every ``metricsLoggingInterval`` (default 1 minute); they are not exported to Prometheus yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import structlog

from datalayer.notifications import EndpointNotificationSource

__all__ = ["RECV_HWM", "KVEventFeed", "KVEventSink", "feed_stats", "kv_event_sources", "topic_source"]

RECV_HWM = 10_000
DEFAULT_STATS_INTERVAL = 60.0  # seconds between index-figure log lines with enableMetrics and no interval
log = structlog.get_logger("datalayer.kv_events")


@runtime_checkable
class KVEventSink(Protocol):
    """What a precise prefix plugin offers its transport (see ``scheduler.plugins.precise.producer``)."""

    name: str
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
        self._wanted: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._central: asyncio.Task[None] | None = None
        self._logger: asyncio.Task[None] | None = None
        self._running = False
        self._zmq: Any = None
        self._unpack: Any = None
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
        self._unpack = msgpack.unpackb
        self._running = True
        if self.events.zmq_endpoint:
            sock = self._socket()
            try:
                sock.bind(self.events.zmq_endpoint)
            except zmq.ZMQError as exc:
                sock.close(linger=0)
                self._running = False
                raise RuntimeError(f"kvEventsConfig.zmqEndpoint {self.events.zmq_endpoint}: {exc}") from None
            self._central = asyncio.create_task(self._receive(sock, None), name="kv-events central")
        for address in sorted(self._wanted):
            self.endpoint_added(address)
        if self.sink.settings.enable_metrics:  # the figures go to the log (no Prometheus families yet)
            interval = self.sink.settings.metrics_logging_interval or DEFAULT_STATS_INTERVAL
            self._logger = asyncio.create_task(self._log_every(interval), name="kv-events stats")

    async def stop(self) -> None:
        self._running = False
        tasks = [t for t in (*self._tasks.values(), self._central, self._logger) if t is not None]
        self._tasks.clear()
        self._central = self._logger = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- receiving -------------------------------------------------------------------------------------

    def _socket(self) -> Any:
        zmq = self._zmq
        sock = zmq.asyncio.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, RECV_HWM)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, self.events.topic_filter.encode())
        return sock

    async def _subscribe(self, address: str) -> None:
        host = address.rpartition(":")[0] or address
        sock = self._socket()
        sock.connect(f"tcp://{host}:{self.events.socket_port}")
        await self._receive(sock, address)

    async def _receive(self, sock: Any, source: str | None) -> None:
        ingest = self.sink.ingester.ingest
        unpack = self._unpack
        try:
            while True:
                frames = await sock.recv_multipart()
                if len(frames) != 3 or len(frames[1]) != 8:
                    self.sink.ingester.malformed += 1
                    continue
                topic, seq, payload = frames
                who = source if source is not None else topic_source(topic)
                if not who:
                    self.unattributed += 1
                    continue
                try:
                    batch = unpack(payload, raw=False, strict_map_key=False)
                except Exception:
                    self.sink.ingester.malformed += 1
                    continue
                ingest(who, int.from_bytes(seq, "big"), batch)
        finally:
            sock.close(linger=0)

    def stats(self) -> dict[str, int]:
        ing = self.sink.ingester
        return {
            "subscriptions": len(self._tasks) + (1 if self._central is not None else 0),
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
        }

    async def _log_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            log.info("kv-block index", plugin=self.sink.name, **self.stats())


def kv_event_sources(
    plugins: Sequence[object], configured: Sequence[EndpointNotificationSource]
) -> list[EndpointNotificationSource]:
    """``configured`` plus one :class:`KVEventFeed` per KV-event plugin. A feed forwards endpoint
    events to its plugin only when no configured source lists the plugin as an extractor already."""
    wired = {id(x) for s in configured for x in s.extractors}
    feeds = [
        KVEventFeed(plugin, follow_endpoints=id(plugin) not in wired)
        for plugin in plugins
        if isinstance(plugin, KVEventSink) and hasattr(plugin.settings, "events")
    ]
    return [*configured, *feeds]


def feed_stats(sources: Sequence[object]) -> Mapping[str, Mapping[str, int]]:
    """``{plugin name: stats}`` of the KV-event feeds among ``sources``."""
    return {s.sink.name: s.stats() for s in sources if isinstance(s, KVEventFeed)}
