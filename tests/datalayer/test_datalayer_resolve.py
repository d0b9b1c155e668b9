"""Host names in addresses: address syntax, the system resolver, the hosts-file resolver."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from datalayer.discovery import (
    HostsFileError,
    HostsFileResolver,
    ResolveError,
    SystemResolver,
    join_address,
    split_address,
)
from datalayer.discovery.resolve import MAX_HOSTS_FILE_BYTES, parse_hosts


@pytest.mark.parametrize(
    "address, parsed",
    [
        ("10.0.0.1:8000", ("10.0.0.1", 8000)),
        ("[fd00::1]:8000", ("fd00::1", 8000)),
        ("localhost:8000", ("localhost", 8000)),
        ("vllm_a:8000", ("vllm_a", 8000)),  # compose service names may hold underscores
        ("gpu-1.pool.svc.cluster.local.:8000", ("gpu-1.pool.svc.cluster.local.", 8000)),
    ],
)
def test_addresses_may_name_hosts(address: str, parsed: tuple[str, int]) -> None:
    assert split_address(address) == parsed


@pytest.mark.parametrize(
    "address, message",
    [
        ("a b:80", "IP address or a host name"),
        ("-a:80", "IP address or a host name"),
        ("a..b:80", "IP address or a host name"),
        ("a\x00b:80", "IP address or a host name"),
        ("é.com:80", "IP address or a host name"),
        (f"{'a' * 64}:80", "IP address or a host name"),
        ("999.1.1.1:80", "not a valid IPv4 address"),
        ("[foo]:80", "IPv6 address inside the brackets"),
        ("[1.2.3.4]:80", "IPv6 address inside the brackets"),
        ("fd00::1:80", "must be bracketed"),
        ("a:８０", "expected host:port"),
        ("a:0", "expected host:port"),
    ],
)
def test_bad_hosts_are_refused_with_the_reason(address: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_address(address)


def test_join_address_brackets_ipv6() -> None:
    assert join_address("10.0.0.1", 80) == "10.0.0.1:80"
    assert join_address("fd00::1", 80) == "[fd00::1]:80"


async def test_system_resolver_answers_localhost_and_refuses_unknown_names() -> None:
    resolver = SystemResolver()
    assert "127.0.0.1" in await resolver.resolve("localhost")
    with pytest.raises(ResolveError):
        await resolver.resolve("no-such-host.invalid")  # RFC 6761: never resolves


async def test_system_resolver_gives_up_after_its_timeout_without_stacking_lookups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    release, calls = asyncio.Event(), []

    async def hung_dns(host: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(host)
        await release.wait()
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.9", 0))]

    monkeypatch.setattr(loop, "getaddrinfo", hung_dns)
    resolver = SystemResolver(timeout=0.05)
    for _ in range(3):
        with pytest.raises(ResolveError, match=r"no answer within 0\.05s"):
            await resolver.resolve("slow.example")
    assert calls == ["slow.example"]  # the lookup still running is awaited again, not started anew
    release.set()
    assert await resolver.resolve("slow.example") == ("10.0.0.9",)
    assert calls == ["slow.example"]


async def test_system_resolver_keeps_ipv4_and_ipv6_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()

    async def answer(*args: Any, **kwargs: Any) -> Any:
        tcp = socket.SOCK_STREAM
        return [
            (socket.AF_INET6, tcp, 6, "", ("fd00::2", 0, 0, 0)),
            (socket.AF_INET, tcp, 6, "", ("10.0.0.2", 0)),
            (socket.AF_INET, tcp, 6, "", ("10.0.0.2", 0)),
        ]

    monkeypatch.setattr(loop, "getaddrinfo", answer)
    assert await SystemResolver().resolve("dual.example") == ("fd00::2", "10.0.0.2")


def test_hosts_format() -> None:
    text = """
# comment
10.0.0.1   a.test  alias.test   # trailing comment
fd00::1    a.test
10.0.0.1   A.TEST
10.0.0.2   b.test.
"""
    assert parse_hosts(text) == {
        "a.test": ("10.0.0.1", "fd00::1"),
        "alias.test": ("10.0.0.1",),
        "b.test": ("10.0.0.2",),
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("10.0.0.1\n", "line 1: expected 'IP name"),
        ("\n10.0.0.300 a.test\n", "line 2: '10.0.0.300' is not an IP address"),
        ("10.0.0.1 bad_name!\n", "line 1: 'bad_name!' is not a host name"),
    ],
)
def test_hosts_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(HostsFileError, match=message):
        parse_hosts(text, "hosts")


class Fallback:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def resolve(self, name: str) -> tuple[str, ...]:
        self.asked.append(name)
        raise ResolveError("Name or service not known")


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


async def test_hosts_file_answers_first_rereads_changes_and_keeps_last_good(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    _write(path, "127.0.0.1 sim.test\n")
    fallback = Fallback()
    resolver = HostsFileResolver(str(path), fallback)
    assert await resolver.resolve("SIM.test.") == ("127.0.0.1",)
    with pytest.raises(ResolveError):
        await resolver.resolve("other.test")
    assert fallback.asked == ["other.test"]
    _write(path, "127.0.0.2 sim.test\n")
    assert await resolver.resolve("sim.test") == ("127.0.0.2",)
    with capture_logs() as logs:
        _write(path, "not-an-ip sim.test\n")
        assert await resolver.resolve("sim.test") == ("127.0.0.2",)
        assert await resolver.resolve("sim.test") == ("127.0.0.2",)
        path.unlink()
        assert await resolver.resolve("sim.test") == ("127.0.0.2",)
        _write(path, "127.0.0.3 sim.test\n")
        assert await resolver.resolve("sim.test") == ("127.0.0.3",)
    assert [(e["log_level"], e["event"]) for e in logs] == [
        ("warning", "hosts file invalid; keeping its last good content"),
        ("warning", "hosts file invalid; keeping its last good content"),  # a new problem: unreadable
        ("info", "hosts file valid again"),
    ]
    assert "cannot read" in logs[1]["error"]


def test_hosts_file_is_checked_when_created(tmp_path: Path) -> None:
    with pytest.raises(HostsFileError, match="cannot read"):
        HostsFileResolver(str(tmp_path / "absent"), Fallback())
    big = tmp_path / "big"
    big.write_text("#" * (MAX_HOSTS_FILE_BYTES + 1))
    with pytest.raises(HostsFileError, match="larger than"):
        HostsFileResolver(str(big), Fallback())
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe 10.0.0.1 a")
    with pytest.raises(HostsFileError, match="UTF-8"):
        HostsFileResolver(str(binary), Fallback())
