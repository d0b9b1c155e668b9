"""epp.sync: the datagram codec, its authentication, the replay guard, and the UDP service in-process."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from epp.app import StartupError, build_app
from epp.app.build import _replica_sync
from epp.config.options import parse_options
from epp.config.parser import UsageError
from epp.sync import ReplicaSyncCollector, ReplicaSyncService, read_key
from epp.sync.wire import (
    HEADER,
    KIND_LOADS,
    KIND_OWNERS,
    MAC_BYTES,
    MAX_DATAGRAM,
    ReplayGuard,
    WireError,
    claim_bytes,
    decode,
    encode_loads,
    encode_owners,
    seal,
    verify,
)
from scheduler.replica_sync import MAX_ANCHORS, OwnershipClaim, ReplicaSyncSink

KEY = b"k" * 32
NOW_MS = 1_800_000_000_000


def owners_datagram(
    claims: list[OwnershipClaim], seq: int = 1, key: bytes = KEY, time_ms: int = NOW_MS
) -> bytes:
    encoded = [c for c in (claim_bytes(claim) for claim in claims) if c is not None]
    (payload,) = list(encode_owners("affinity", encoded))
    return seal(key, KIND_OWNERS, 7, seq, time_ms, payload)


CLAIM = OwnershipClaim("10.0.0.1:8000", 2**64 - 1, ((1, True), (2**63, False)), placement=3)


def test_owners_round_trip() -> None:
    data = owners_datagram([CLAIM, OwnershipClaim("[fd00::1]:8000", 0, ())])
    verify(KEY, data)
    message = decode(data)
    assert (message.kind, message.sender, message.seq, message.time_ms) == (KIND_OWNERS, 7, 1, NOW_MS)
    assert message.plugin == "affinity"
    assert message.claims == (CLAIM, OwnershipClaim("[fd00::1]:8000", 0, ()))


def test_loads_round_trip_and_split_over_datagrams() -> None:
    counts = {f"10.0.{i // 250}.{i % 250}:8000": i for i in range(200)}
    payloads = list(encode_loads("affinity", 9, counts))
    assert len(payloads) > 1
    got: dict[str, int] = {}
    for seq, payload in enumerate(payloads, start=1):
        data = seal(KEY, KIND_LOADS, 7, seq, NOW_MS, payload)
        assert len(data) <= MAX_DATAGRAM
        message = decode(data)
        assert message.generation == 9
        got.update(message.loads)
    assert got == counts
    (empty,) = list(encode_loads("affinity", 10, {}))  # an empty count list is still sent (a heartbeat)
    assert decode(seal(KEY, KIND_LOADS, 7, 1, NOW_MS, empty)).loads == ()


def test_claims_that_cannot_be_sent_are_refused_and_many_claims_split() -> None:
    assert claim_bytes(OwnershipClaim("a:1", 2**64, ())) is None  # not a 64-bit hash
    assert claim_bytes(OwnershipClaim("a:1", -1, ())) is None
    assert claim_bytes(OwnershipClaim("a" * 300 + ":1", 1, ())) is None
    assert claim_bytes(OwnershipClaim("a:1", 1, tuple((i, True) for i in range(MAX_ANCHORS + 1)))) is None
    big = OwnershipClaim("10.0.0.1:8000", 1, tuple((i, True) for i in range(MAX_ANCHORS)))
    encoded = claim_bytes(big)
    assert encoded is not None
    payloads = list(encode_owners("affinity", [encoded] * 5))
    assert len(payloads) >= 3
    assert sum(len(decode(seal(KEY, KIND_OWNERS, 1, 1, NOW_MS, p)).claims) for p in payloads) == 5
    assert all(HEADER.size + len(p) + MAC_BYTES <= MAX_DATAGRAM for p in payloads)


def test_forged_tampered_and_foreign_datagrams_do_not_verify() -> None:
    data = owners_datagram([CLAIM])
    with pytest.raises(WireError) as err:
        verify(b"x" * 32, data)  # another key
    assert err.value.reason == "auth"
    for i in (5, 20, len(data) - 40, len(data) - 1):  # any flipped byte
        tampered = bytearray(data)
        tampered[i] ^= 0x01
        with pytest.raises(WireError):
            verify(KEY, bytes(tampered))
    with pytest.raises(WireError) as err:
        verify(KEY, b"PYRS")
    assert err.value.reason == "size"
    with pytest.raises(WireError) as err:
        verify(KEY, data[:-1] + b"\x00" * (MAX_DATAGRAM + 1 - len(data) + 1))
    assert err.value.reason == "size"
    with pytest.raises(WireError) as err:
        verify(KEY, b"HTTP" + data[4:])
    assert err.value.reason == "format"


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=MAX_DATAGRAM - HEADER.size - MAC_BYTES), st.sampled_from([KIND_OWNERS, KIND_LOADS, 9])
)
def test_a_sealed_garbage_payload_raises_wire_error_only(payload: bytes, kind: int) -> None:
    """Even a payload signed with the right key (a peer's bug) decodes or raises WireError, nothing else."""
    data = seal(KEY, kind, 1, 1, NOW_MS, payload)
    verify(KEY, data)
    try:
        decode(data)
    except WireError as exc:
        assert exc.reason == "format"


def test_replay_guard_window_reorder_and_bounds() -> None:
    guard = ReplayGuard(window=5.0, max_senders=2)
    now = NOW_MS / 1000
    guard.check(1, 10, NOW_MS, now)
    with pytest.raises(WireError, match="replay"):
        guard.check(1, 10, NOW_MS, now)  # the same datagram twice
    guard.check(1, 12, NOW_MS, now)
    guard.check(1, 11, NOW_MS, now)  # reordered: still new
    with pytest.raises(WireError, match="replay"):
        guard.check(1, 11, NOW_MS, now)
    guard.check(1, 100, NOW_MS, now)
    with pytest.raises(WireError, match="replay"):
        guard.check(1, 30, NOW_MS, now)  # more than 64 behind: too old to tell
    with pytest.raises(WireError, match="stale"):
        guard.check(1, 101, NOW_MS - 6000, now)
    with pytest.raises(WireError, match="stale"):
        guard.check(1, 101, NOW_MS + 6000, now)
    guard.check(2, 1, NOW_MS, now)
    with pytest.raises(WireError, match="peers"):
        guard.check(3, 1, NOW_MS, now)  # two live senders already
    guard.check(3, 1, NOW_MS + 5500, now + 5.5)  # sender 1 and 2 silent past the window: one is dropped
    assert len(guard) == 2


def test_read_key(tmp_path: Path) -> None:
    good = tmp_path / "key"
    good.write_bytes(b"  0123456789abcdef0123\n")
    assert read_key(str(good)) == b"0123456789abcdef0123"
    short = tmp_path / "short"
    short.write_bytes(b"secret\n")
    with pytest.raises(ValueError, match="at least 16"):
        read_key(str(short))
    with pytest.raises(ValueError, match="cannot read"):
        read_key(str(tmp_path / "missing"))


# -- the service, two instances over loopback ---------------------------------------------------------


class FakePlugin:
    """A ReplicaSynced stand-in recording what it is given."""

    def __init__(self, name: str = "affinity") -> None:
        self.name = name
        self.claims: list[OwnershipClaim] = []
        self.loads: dict[int, dict[str, int]] = {}
        self.own: dict[str, int] = {}
        self.sink: ReplicaSyncSink | None = None

    def attach_replica_sync(self, sink: ReplicaSyncSink) -> None:
        self.sink = sink

    def replica_loads(self) -> dict[str, int]:
        return dict(self.own)

    def apply_remote_ownership(self, claim: OwnershipClaim) -> None:
        self.claims.append(claim)

    def apply_remote_loads(self, peer: int, counts: Mapping[str, int], ttl: float) -> None:
        self.loads[peer] = dict(counts)


def free_udp_ports(n: int) -> list[int]:
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


POOL = {"10.0.0.1:8000", "10.0.0.2:8000"}


async def pair(
    interval: float = 0.02,
) -> tuple[ReplicaSyncService, FakePlugin, ReplicaSyncService, FakePlugin]:
    pa, pb = free_udp_ports(2)
    fa, fb = FakePlugin(), FakePlugin()
    a = ReplicaSyncService(port=pa, peers=[f"127.0.0.1:{pb}"], key=KEY, plugins=[fa],
                           in_pool=POOL.__contains__, interval=interval, host="127.0.0.1")  # fmt: skip
    b = ReplicaSyncService(port=pb, peers=[f"127.0.0.1:{pa}", f"localhost:{pb}"], key=KEY, plugins=[fb],
                           in_pool=POOL.__contains__, interval=interval, host="127.0.0.1")  # fmt: skip
    await a.start()
    await b.start()
    return a, fa, b, fb


async def until(condition: object, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_two_services_exchange_claims_and_loads() -> None:
    a, fa, b, fb = await pair()
    try:
        assert b.destinations == [("127.0.0.1", a.port)]  # localhost:own port resolved and skipped
        assert fa.sink is a
        fa.own = {"10.0.0.1:8000": 3, "10.9.9.9:8000": 1}  # the second is not in the pool
        a.ownership("affinity", CLAIM)
        a.ownership("affinity", OwnershipClaim("10.9.9.9:8000", 1, ((1, True),)))  # not in the pool
        await until(lambda: fb.claims and fb.loads)
        assert fb.claims == [CLAIM]
        assert list(fb.loads.values()) == [{"10.0.0.1:8000": 3}]
        assert list(fb.loads) == [a.sender]
        assert b.ignored["endpoint"] >= 2
        assert fa.claims == []  # no echo
        registry = CollectorRegistry()
        registry.register(ReplicaSyncCollector(b))
        text = generate_latest(registry).decode()
        assert f"pyepp_replica_sync_datagrams_received_total {float(b.received)}" in text
        assert "pyepp_replica_sync_claims_applied_total 1.0" in text
        assert 'pyepp_replica_sync_entries_ignored_total{reason="endpoint"}' in text
        assert "pyepp_replica_sync_peers 1.0" in text
    finally:
        await a.stop()
        await b.stop()


async def test_the_service_rejects_what_an_attacker_sends() -> None:
    """From a peer's address but without the key: forged, replayed, oversized, flooded datagrams."""
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.bind(("127.0.0.1", 0))
    fake = FakePlugin()
    (port,) = free_udp_ports(1)
    service = ReplicaSyncService(port=port, peers=[f"127.0.0.1:{attacker.getsockname()[1]}"], key=KEY,
                                 plugins=[fake], in_pool=POOL.__contains__, host="127.0.0.1",
                                 max_rate=200)  # fmt: skip
    await service.start()
    try:
        target = ("127.0.0.1", service.port)
        wall = int(time.time() * 1000)
        valid = owners_datagram([CLAIM], seq=1, time_ms=wall)
        attacker.sendto(owners_datagram([CLAIM], key=b"w" * 32, time_ms=wall), target)  # forged
        attacker.sendto(valid, target)
        attacker.sendto(valid, target)  # replayed
        attacker.sendto(owners_datagram([CLAIM], seq=2, time_ms=wall - 60_000), target)  # stale
        attacker.sendto(b"\x00" * 1500, target)  # oversized
        attacker.sendto(b"garbage", target)
        await until(lambda: sum(service.rejected.values()) >= 5)
        assert fake.claims == [CLAIM]  # only the one valid datagram, once
        assert service.rejected["auth"] == 1
        assert service.rejected["replay"] == 1
        assert service.rejected["stale"] == 1
        assert service.rejected["size"] == 2
        for _ in range(40):  # a flood: the receive budget (200/s) drops most before any HMAC
            for _ in range(50):
                attacker.sendto(valid, target)
            await asyncio.sleep(0.001)
        await until(lambda: service.rejected["rate"] > 1000)
        other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        other.sendto(valid, target)  # not a peer's address
        await until(lambda: service.rejected["source"] == 1)
        other.close()
    finally:
        attacker.close()
        await service.stop()


async def test_a_flood_from_one_peer_address_does_not_starve_another() -> None:
    """Spoofing peer A's address spends A's share of the receive budget; peer B's datagrams still pass."""
    a, b = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    for sock in (a, b):
        sock.bind(("127.0.0.1", 0))
    fake = FakePlugin()
    (port,) = free_udp_ports(1)
    peers = [f"127.0.0.1:{sock.getsockname()[1]}" for sock in (a, b)]
    service = ReplicaSyncService(port=port, peers=peers, key=KEY, plugins=[fake], in_pool=POOL.__contains__,
                                 host="127.0.0.1", max_rate=200)  # fmt: skip
    await service.start()
    try:
        target = ("127.0.0.1", service.port)
        wall = int(time.time() * 1000)
        junk = owners_datagram([CLAIM], key=b"w" * 32, time_ms=wall)  # no key: any bytes will do
        for _ in range(20):  # 1,000 datagrams from A's address: its 100/s share is spent at once
            for _ in range(50):
                a.sendto(junk, target)
            await asyncio.sleep(0.001)
        await until(lambda: service.rejected["rate"] > 500)
        for seq in range(1, 41):  # B sends 40 at once: within its own share (100)
            b.sendto(seal(KEY, KIND_OWNERS, 11, seq, wall, _owners_payload([CLAIM])), target)
        await until(lambda: len(fake.claims) >= 40)
        assert fake.claims == [CLAIM] * 40
    finally:
        a.close()
        b.close()
        await service.stop()


def _owners_payload(claims: list[OwnershipClaim]) -> bytes:
    encoded = [c for c in (claim_bytes(claim) for claim in claims) if c is not None]
    (payload,) = list(encode_owners("affinity", encoded))
    return payload


# -- flags and startup ----------------------------------------------------------------------------------


def test_replica_sync_flags_are_checked(tmp_path: Path) -> None:
    base = ["--endpoints", "127.0.0.1:8000"]
    assert parse_options(base).replica_sync_port == 0
    with pytest.raises(UsageError, match="--replica-sync-port needs --replica-peers"):
        parse_options([*base, "--replica-sync-port", "9005"])
    with pytest.raises(UsageError, match="needs --replica-sync-key-file"):
        parse_options([*base, "--replica-sync-port", "9005", "--replica-peers", "10.0.0.2:9005"])
    with pytest.raises(UsageError, match="--replica-peers applies only with --replica-sync-port"):
        parse_options([*base, "--replica-peers", "10.0.0.2:9005"])
    with pytest.raises(UsageError, match="--replica-peers: expected host:port"):
        parse_options(
            [*base, "--replica-sync-port", "9005", "--replica-peers", "nope", "--replica-sync-key-file", "k"]
        )
    with pytest.raises(UsageError, match="--replica-sync-interval"):
        parse_options([*base, "--replica-sync-port", "9005", "--replica-peers", "a:1",
                       "--replica-sync-key-file", "k", "--replica-sync-interval", "20s"])  # fmt: skip
    with pytest.raises(UsageError, match="over IPv4"):
        parse_options([*base, "--replica-sync-port", "9005", "--replica-peers", "a:1,[fd00::2]:9005",
                       "--replica-sync-key-file", "k"])  # fmt: skip
    options = parse_options([*base, "--replica-sync-port", "9005", "--replica-peers", "a:1,10.0.0.2:9005",
                             "--replica-sync-key-file", "k", "--replica-sync-interval", "25ms"])  # fmt: skip
    assert options.replica_peers == ("a:1", "10.0.0.2:9005")
    assert options.replica_sync_interval == 0.025


async def test_a_short_key_stops_the_start(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("short\n")
    flags = ["--endpoints", "127.0.0.1:8000", "--replica-sync-port", "9005",
             "--replica-peers", "127.0.0.1:9006", "--replica-sync-key-file", str(key)]  # fmt: skip
    with pytest.raises(StartupError, match=r"--replica-sync-key-file: .*the key has 5 bytes; at least 16"):
        await build_app(parse_options(flags))


async def test_the_sync_socket_binds_host_and_refuses_an_ipv6_host(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("k" * 32)
    flags = ["--endpoints", "127.0.0.1:8000", "--replica-sync-port", "9005",
             "--replica-peers", "127.0.0.1:9006", "--replica-sync-key-file", str(key)]  # fmt: skip
    with pytest.raises(StartupError, match=r"replica sync is IPv4 only; --host ::1 is an IPv6 address"):
        await build_app(parse_options([*flags, "--host", "::1"]))
    options = parse_options([*flags, "--host", "127.0.0.1"])
    layer: Any = SimpleNamespace(get=lambda address: None)
    service = _replica_sync(options, [], layer)
    assert service is not None and service.host == "127.0.0.1"
    everywhere = _replica_sync(parse_options([*flags, "--host", "::"]), [], layer)
    assert everywhere is not None and everywhere.host == "0.0.0.0"


def test_load_reports_in_parts_merge_and_an_older_generation_is_dropped() -> None:
    fake = FakePlugin()
    pool = {f"10.1.{i // 250}.{i % 250}:8000" for i in range(300)}
    service = ReplicaSyncService(
        port=1, peers=["127.0.0.1:2"], key=KEY, plugins=[fake], in_pool=pool.__contains__
    )
    service._allowed = {("127.0.0.1", 2)}
    wall = int(time.time() * 1000)
    counts = {address: 1 + i for i, address in enumerate(sorted(pool))}
    parts = list(encode_loads("affinity", 5, counts))
    assert len(parts) >= 3
    for seq, payload in enumerate(parts, start=1):
        service.datagram_received(seal(KEY, KIND_LOADS, 99, seq, wall, payload), ("127.0.0.1", 2))
    assert fake.loads[99] == counts  # every part of generation 5, merged
    (newer,) = list(encode_loads("affinity", 6, {"10.1.0.0:8000": 7}))
    service.datagram_received(seal(KEY, KIND_LOADS, 99, 50, wall, newer), ("127.0.0.1", 2))
    assert fake.loads[99] == {"10.1.0.0:8000": 7}  # a new generation replaces the counts
    (older,) = list(encode_loads("affinity", 5, {"10.1.0.1:8000": 9}))
    service.datagram_received(seal(KEY, KIND_LOADS, 99, 51, wall, older), ("127.0.0.1", 2))
    assert fake.loads[99] == {"10.1.0.0:8000": 7} and service.rejected["stale"] == 1
    (other,) = list(encode_loads("other-plugin", 1, {"10.1.0.0:8000": 1}))
    service.datagram_received(seal(KEY, KIND_LOADS, 99, 52, wall, other), ("127.0.0.1", 2))
    assert service.ignored["plugin"] == 1
    service.datagram_received(seal(KEY, KIND_LOADS, service.sender, 1, wall, newer), ("127.0.0.1", 2))
    assert service.rejected["self"] == 1  # its own datagram (a peer list naming itself)
