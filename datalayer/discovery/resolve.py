"""Host-name resolution for the standalone discovery sources (``--endpoints``, ``--endpoints-file``).

The seam is :class:`Resolver`: ``await resolve(name)`` returns every IPv4 and IPv6 address of a host
name (every A and AAAA record counts, as in an Envoy STRICT_DNS cluster) or raises
:class:`ResolveError` saying why. Implementations:

* :class:`SystemResolver`: the operating system's resolver (``getaddrinfo`` on a worker thread, so
  ``/etc/hosts``, DNS and nsswitch apply as for any program), bounded by a timeout per lookup; a lookup
  that timed out keeps running on its thread and is awaited again by the next call for that name, so
  at most one thread per name is ever busy (a hung DNS server cannot pile up threads or queued work);
* :class:`HostsFileResolver`: names listed in a hosts-format file (``IP name [alias ...]``, ``#``
  comments, at most :data:`MAX_HOSTS_FILE_BYTES`) answer from that file, other names go to a fallback
  resolver (``--endpoints-hosts-file``, a testing and operations aid: move a name without touching
  DNS). The file is re-read when it changes (mtime, size, inode); a file that becomes unreadable or
  invalid keeps its last good content and logs one warning per distinct problem.

Tests use a fake: any object with the ``resolve`` coroutine.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Mapping
from typing import Any, Protocol

import structlog

from datalayer.discovery.base import split_address

__all__ = [
    "MAX_HOSTS_FILE_BYTES",
    "HostsFileError",
    "HostsFileResolver",
    "ResolveError",
    "Resolver",
    "SystemResolver",
    "parse_hosts",
]

log = structlog.get_logger("datalayer")

MAX_HOSTS_FILE_BYTES = 1024 * 1024
"""A larger hosts file is refused (it would be re-read whenever it changes)."""


class ResolveError(Exception):
    """A name has no address now; ``str()`` says why (without the name, which the caller adds)."""


class Resolver(Protocol):
    async def resolve(self, name: str) -> tuple[str, ...]:
        """Every IPv4 / IPv6 address of host name ``name`` (unbracketed, no duplicates, at least one).

        Raises :class:`ResolveError` when the name does not resolve or the lookup fails or times out;
        never anything else for a bad name. Safe to call concurrently.
        """
        ...


class SystemResolver:
    """``getaddrinfo`` (A and AAAA) with a timeout per lookup (default 5 s)."""

    def __init__(self, *, timeout: float = 5.0) -> None:
        if not timeout > 0:
            raise ValueError("SystemResolver.timeout: expected a positive number of seconds")
        self.timeout = timeout
        self._running: dict[str, asyncio.Future[Any]] = {}  # name -> its lookup still in progress

    def _lookup(self, name: str) -> asyncio.Future[Any]:
        running = self._running.get(name)
        if running is not None:
            return running
        loop = asyncio.get_running_loop()
        future = asyncio.ensure_future(loop.getaddrinfo(name, None, type=socket.SOCK_STREAM))
        self._running[name] = future

        def finished(done: asyncio.Future[Any]) -> None:
            del self._running[name]
            if not done.cancelled():
                done.exception()  # retrieved here, so an abandoned failure is not reported as unhandled

        future.add_done_callback(finished)
        return future

    async def resolve(self, name: str) -> tuple[str, ...]:
        try:
            infos = await asyncio.wait_for(asyncio.shield(self._lookup(name)), self.timeout)
        except TimeoutError:
            raise ResolveError(f"no answer within {self.timeout:g}s") from None
        except (OSError, UnicodeError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ResolveError(reason or type(exc).__name__) from None
        addresses: dict[str, None] = {}
        for family, _, _, _, sockaddr in infos:
            if family in (socket.AF_INET, socket.AF_INET6):
                addresses[str(sockaddr[0])] = None
        if not addresses:
            raise ResolveError("no IPv4 or IPv6 address")
        return tuple(addresses)


class HostsFileError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


def parse_hosts(text: str, path: str = "<hosts>") -> dict[str, tuple[str, ...]]:
    """Hosts-file text -> {lower-case name: addresses in file order}. Raises :class:`HostsFileError`
    naming the line for an entry that is not ``IP name [alias ...]``."""
    hosts: dict[str, dict[str, None]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.partition("#")[0].split()
        if not fields:
            continue
        if len(fields) < 2:
            raise HostsFileError(path, f"line {number}: expected 'IP name [alias ...]', got {line.strip()!r}")
        try:
            ip = str(ipaddress.ip_address(fields[0]))
        except ValueError:
            raise HostsFileError(path, f"line {number}: {fields[0]!r} is not an IP address") from None
        for name in fields[1:]:
            try:
                host, _ = split_address(f"{name}:1")
            except ValueError:
                raise HostsFileError(path, f"line {number}: {name!r} is not a host name") from None
            hosts.setdefault(host.lower().rstrip("."), {})[ip] = None
    return {name: tuple(ips) for name, ips in hosts.items()}


def load_hosts(path: str) -> dict[str, tuple[str, ...]]:
    """Read and parse a hosts file; raises :class:`HostsFileError` (unreadable, too large, invalid)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_HOSTS_FILE_BYTES + 1)
    except OSError as exc:
        raise HostsFileError(path, f"cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_HOSTS_FILE_BYTES:
        raise HostsFileError(path, f"larger than {MAX_HOSTS_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HostsFileError(path, "not UTF-8 text") from None
    return parse_hosts(text, path)


class HostsFileResolver:
    """Names in the hosts file at ``path`` answer from it; others from ``fallback``.

    The constructor reads the file and raises :class:`HostsFileError` when it cannot (a startup check).
    """

    def __init__(self, path: str, fallback: Resolver) -> None:
        self.path = path
        self.fallback = fallback
        self._stamp = self._stat()
        self._hosts: Mapping[str, tuple[str, ...]] = load_hosts(path)
        self._problem: str | None = None

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _refresh(self) -> None:
        stamp = self._stat()
        if stamp is not None and stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._hosts = load_hosts(self.path)
        except HostsFileError as exc:
            if str(exc) != self._problem:
                self._problem = str(exc)
                log.warning("hosts file invalid; keeping its last good content", error=str(exc))
            return
        if self._problem is not None:
            log.info("hosts file valid again", path=self.path)
        self._problem = None

    async def resolve(self, name: str) -> tuple[str, ...]:
        self._refresh()
        addresses = self._hosts.get(name.lower().rstrip("."))
        if addresses is not None:
            return addresses
        return await self.fallback.resolve(name)
