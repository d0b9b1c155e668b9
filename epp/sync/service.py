"""Replica sync over UDP (pyepp): active-active picker replicas share prefix ownership and load.

``--replica-sync-port PORT`` binds a UDP socket; ``--replica-peers`` names the other replicas
(``host:port`` items; a host name, e.g. a headless Service's, is re-resolved every
``resolve_interval`` seconds to all its IPv4 addresses; this replica's own address is skipped);
``--replica-sync-key-file`` holds the shared key (at least 16 bytes; surrounding whitespace is
stripped). What flows (:mod:`scheduler.replica_sync`, :mod:`epp.sync.wire`):

* OWNERS: every new ownership a :class:`~scheduler.replica_sync.ReplicaSynced` plugin records, batched
  for ``flush_delay`` seconds (5 ms) into as few datagrams as fit, sent to every peer;
* LOADS: every ``interval`` seconds (``--replica-sync-interval``), each such plugin's own in-flight
  counts per endpoint; a peer applies them for ``4 x interval`` seconds, so a replica that goes silent
  stops counting within that time.

Defences (an attacker can reach the port but does not hold the key): a datagram is dropped unless it
comes from a peer's address (``source``), is at most :data:`~epp.sync.wire.MAX_DATAGRAM` bytes
(``size``), fits its source's share of the receive budget of ``max_rate`` datagrams per second (a
token bucket per peer address, ``max_rate / peers`` each, checked before any cryptography:
``rate``), carries a valid HMAC-SHA256 (``auth``), is within 5 s of this replica's clock (``stale``),
was not accepted before (``replay``), comes from one of at most 64 live senders (``peers``) and
decodes exactly (``format``); its claims and counts naming an endpoint that is not in the current
pool, or a plugin this replica does not run, are ignored. Memory is bounded: the
replay window per sender, the pending claims (``MAX_PENDING``; beyond, claims are dropped and
counted), the partial LOADS per (sender, plugin), the send buffer (beyond ``MAX_SEND_BUFFER`` bytes
queued in the transport, datagrams are dropped). Nothing in a datagram can raise out of the
receive path. Flooding the port from one peer's address (spoofed) spends that address's share of the
receive budget and so delays what that peer shares, not what the others share; routing itself never
waits on sync (each replica falls back to its own view).

Metrics (ours, at scrape time): ``pyepp_replica_sync_datagrams_sent_total``,
``pyepp_replica_sync_datagrams_received_total`` (accepted), ``pyepp_replica_sync_datagrams_rejected_total
{reason}``, ``pyepp_replica_sync_claims_applied_total``, ``pyepp_replica_sync_entries_ignored_total
{reason}`` (``endpoint``, ``plugin``, ``dropped``, ``send_error``: claims or counts not applied or not
sent) and
``pyepp_replica_sync_peers`` (addresses sent to).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from datalayer.discovery.base import is_ip_literal, split_address
from epp.sync.wire import (
    KIND_LOADS,
    KIND_OWNERS,
    MAX_DATAGRAM,
    MIN_KEY_BYTES,
    ReplayGuard,
    WireError,
    claim_bytes,
    decode,
    encode_loads,
    encode_owners,
    seal,
    verify,
)
from scheduler.replica_sync import OwnershipClaim, ReplicaSynced

__all__ = ["ReplicaSyncCollector", "ReplicaSyncService", "read_key"]

_log = structlog.get_logger("epp.sync")

MAX_PEERS = 64
MAX_PENDING = 4096
MAX_SEND_BUFFER = 1 << 20
FLUSH_DELAY = 0.005
REPLAY_WINDOW = 5.0


def read_key(path: str) -> bytes:
    """The shared key in ``path`` (surrounding whitespace stripped); raises ValueError naming the file."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the key: {exc.strerror or exc}") from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{path}: the key has {len(key)} bytes; at least {MIN_KEY_BYTES} are required")
    return key


def _own_ips() -> set[str]:
    ips = {"127.0.0.1"}
    with contextlib.suppress(OSError):
        ips.add(socket.gethostbyname(socket.gethostname()))
    if pod_ip := os.environ.get("POD_IP"):
        ips.add(pod_ip)
    return ips


class ReplicaSyncService(asyncio.DatagramProtocol):
    """The UDP endpoint of replica sync (see the module docstring); also the plugins' sink."""

    def __init__(
        self,
        *,
        port: int,
        peers: Sequence[str],
        key: bytes,
        plugins: Sequence[ReplicaSynced],
        in_pool: Callable[[str], bool],
        interval: float = 0.05,
        host: str = "0.0.0.0",
        resolve_interval: float = 5.0,
        max_rate: float = 4000.0,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the replica-sync key must have at least {MIN_KEY_BYTES} bytes")
        self.port = port
        self.host = host
        self._peer_specs = [split_address(p) for p in peers]
        self._key = key
        self._plugins = {p.name: p for p in plugins}
        self._in_pool = in_pool
        self.interval = interval
        self.ttl = 4 * interval
        self.resolve_interval = resolve_interval
        self.max_rate = max_rate
        self._wall = wall_clock
        self.sender = secrets.randbits(64)
        self._seq = 0
        self._generation = 0
        self._guard = ReplayGuard(REPLAY_WINDOW, MAX_PEERS)
        self._own_ips = _own_ips()
        self.destinations: list[tuple[str, int]] = []
        self._allowed: set[tuple[str, int]] = set()
        self._pending: dict[str, list[bytes]] = {}
        self._pending_count = 0
        self._flush_handle: asyncio.TimerHandle | None = None
        self._load_parts: dict[tuple[int, str], tuple[int, dict[str, int]]] = {}
        self._buckets: dict[tuple[str, int], list[float]] = {}  # peer address -> [tokens, refilled at]
        self._transport: asyncio.DatagramTransport | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.sent = 0
        self.received = 0
        self.claims_applied = 0
        self.rejected: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: self, local_addr=(self.host, self.port), family=socket.AF_INET
        )
        self._transport = transport
        self.port = transport.get_extra_info("sockname")[1]
        await self._resolve()
        for plugin in self._plugins.values():
            plugin.attach_replica_sync(self)
        self._tasks.append(asyncio.create_task(self._send_loads(), name="epp-replica-sync-loads"))
        if any(not is_ip_literal(host) for host, _ in self._peer_specs):
            self._tasks.append(asyncio.create_task(self._resolve_loop(), name="epp-replica-sync-resolve"))
        _log.info(
            "replica sync started",
            port=self.port,
            peers=[f"{h}:{p}" for h, p in self.destinations],
            plugins=sorted(self._plugins),
            interval_seconds=self.interval,
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # -- peers ------------------------------------------------------------------------------------

    async def _resolve(self) -> None:
        loop = asyncio.get_running_loop()
        out: list[tuple[str, int]] = []
        for host, port in self._peer_specs:
            if is_ip_literal(host):
                ips = [host]
            else:
                try:
                    infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_DGRAM)
                except OSError as exc:
                    _log.warning("replica sync: cannot resolve a peer", peer=f"{host}:{port}", error=str(exc))
                    infos = []
                ips = sorted({str(info[4][0]) for info in infos})
            for ip in ips:
                if (ip, port) not in out and not (ip in self._own_ips and port == self.port):
                    out.append((ip, port))
        if len(out) > MAX_PEERS:
            _log.warning("replica sync: too many peers; the first are kept", peers=len(out), kept=MAX_PEERS)
            out = out[:MAX_PEERS]
        if out != self.destinations:
            self.destinations = out
            self._allowed = set(out)
            self._buckets = {a: b for a, b in self._buckets.items() if a in self._allowed}

    async def _resolve_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resolve_interval)
            await self._resolve()

    # -- sending ----------------------------------------------------------------------------------

    def ownership(self, plugin: str, claim: OwnershipClaim) -> None:
        """The sink: queue ``claim`` for the next flush (within FLUSH_DELAY seconds)."""
        if self._transport is None or not self.destinations:
            return
        if self._pending_count >= MAX_PENDING:
            self.ignored["dropped"] += 1
            return
        encoded = claim_bytes(claim)
        if encoded is None:
            self.ignored["dropped"] += 1
            return
        self._pending.setdefault(plugin, []).append(encoded)
        self._pending_count += 1
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(FLUSH_DELAY, self.flush)

    def flush(self) -> None:
        self._flush_handle = None
        pending, self._pending, self._pending_count = self._pending, {}, 0
        for plugin, claims in pending.items():
            for payload in encode_owners(plugin, claims):
                self._send(KIND_OWNERS, payload)

    async def _send_loads(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.send_loads()

    def send_loads(self) -> None:
        self._generation = (self._generation + 1) & 0xFFFFFFFF
        for name, plugin in self._plugins.items():
            for payload in encode_loads(name, self._generation, plugin.replica_loads()):
                self._send(KIND_LOADS, payload)

    def _send(self, kind: int, payload: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._seq += 1
        buffered = getattr(transport, "get_write_buffer_size", None)
        data = seal(self._key, kind, self.sender, self._seq, int(self._wall() * 1000), payload)
        for destination in self.destinations:
            if buffered is not None and buffered() > MAX_SEND_BUFFER:
                self.ignored["dropped"] += 1
                continue
            transport.sendto(data, destination)
            self.sent += 1

    # -- receiving --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass

    def error_received(self, exc: Exception) -> None:  # e.g. ICMP port unreachable from a peer not up yet
        self.ignored["send_error"] += 1

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        try:
            self._receive(data, addr)
        except WireError as exc:
            self.rejected[exc.reason] += 1
        except Exception:  # never let a datagram break the loop; count it
            self.rejected["error"] += 1
            _log.exception("replica sync: a datagram could not be handled")

    def _receive(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        source = (addr[0], addr[1])
        if source not in self._allowed:
            raise WireError("source", f"{addr[0]}:{addr[1]} is not a peer")
        if len(data) > MAX_DATAGRAM:
            raise WireError("size", f"{len(data)} bytes")
        now = time.monotonic()
        rate = self.max_rate / len(self._allowed)  # each peer address its share: one cannot starve another
        bucket = self._buckets.get(source)
        if bucket is None:
            bucket = self._buckets[source] = [rate, now]
        tokens = min(rate, bucket[0] + (now - bucket[1]) * rate)
        bucket[1] = now
        if tokens < 1.0:
            bucket[0] = tokens
            raise WireError("rate", "over the peer's share of the receive budget")
        bucket[0] = tokens - 1.0
        verify(self._key, data)
        message = decode(data)
        if message.sender == self.sender:
            raise WireError("self", "own datagram")
        self._guard.check(message.sender, message.seq, message.time_ms, self._wall())
        self.received += 1
        plugin = self._plugins.get(message.plugin)
        if plugin is None:
            self.ignored["plugin"] += 1
            return
        if message.kind == KIND_OWNERS:
            for claim in message.claims:
                if self._in_pool(claim.address):
                    plugin.apply_remote_ownership(claim)
                    self.claims_applied += 1
                else:
                    self.ignored["endpoint"] += 1
        else:
            self._apply_loads(plugin, message.sender, message.generation, message.loads)

    def _apply_loads(
        self, plugin: ReplicaSynced, sender: int, generation: int, loads: Iterable[tuple[str, int]]
    ) -> None:
        key = (sender, plugin.name)
        current = self._load_parts.get(key)
        if current is None or current[0] != generation:
            if current is not None and (generation - current[0]) & 0xFFFFFFFF >= 1 << 31:
                raise WireError("stale", "an older load generation")
            self._load_parts.pop(key, None)
            while len(self._load_parts) >= MAX_PEERS * max(1, len(self._plugins)):
                self._load_parts.pop(next(iter(self._load_parts)))
            current = (generation, {})
            self._load_parts[key] = current
        counts = current[1]
        for address, count in loads:
            if self._in_pool(address):
                counts[address] = count
            else:
                self.ignored["endpoint"] += 1
        plugin.apply_remote_loads(sender, counts, self.ttl)

    # -- metrics ----------------------------------------------------------------------------------

    def rows(self) -> Mapping[str, Any]:
        return {
            "sent": self.sent,
            "received": self.received,
            "claims_applied": self.claims_applied,
            "rejected": dict(self.rejected),
            "ignored": dict(self.ignored),
            "peers": len(self.destinations),
        }


class ReplicaSyncCollector(Collector):
    """The ``pyepp_replica_sync_*`` families (module docstring), read at scrape time."""

    def __init__(self, service: ReplicaSyncService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        s = self._service
        yield _counter(
            "pyepp_replica_sync_datagrams_sent", "Replica-sync datagrams sent (one per peer)", s.sent
        )
        yield _counter("pyepp_replica_sync_datagrams_received", "Replica-sync datagrams accepted", s.received)
        rejected = CounterMetricFamily(
            "pyepp_replica_sync_datagrams_rejected",
            "Replica-sync datagrams dropped, by reason",
            labels=["reason"],
        )
        for reason, count in sorted(s.rejected.items()):
            rejected.add_metric([reason], count)
        yield rejected
        yield _counter(
            "pyepp_replica_sync_claims_applied", "Peer ownership claims recorded", s.claims_applied
        )
        ignored = CounterMetricFamily(
            "pyepp_replica_sync_entries_ignored",
            "Replica-sync claims or load entries not applied or not sent, by reason",
            labels=["reason"],
        )
        for reason, count in sorted(s.ignored.items()):
            ignored.add_metric([reason], count)
        yield ignored
        yield GaugeMetricFamily(
            "pyepp_replica_sync_peers", "Peer addresses sent to", value=len(s.destinations)
        )

    def describe(self) -> Iterator[Metric]:
        return iter(())


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
