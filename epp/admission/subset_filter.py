"""Restrict the endpoint snapshot to the proxy's subset hint.

An entry with a port (``10.0.0.1:8000``, ``[fd00::1]:8000``) matches an endpoint address exactly; a bare
IP (``10.0.0.1``, ``fd00::1``, ``[fd00::1]``) matches every endpoint on that IP. Order of the snapshot
is preserved.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.types import EndpointView

__all__ = ["host_of", "select_subset"]


def host_of(address: str) -> str:
    """The IP part of ``ip:port`` / ``[v6]:port`` / bare ``ip`` (brackets removed)."""
    if address.startswith("["):
        return address[1 : address.find("]")] if "]" in address else address[1:]
    if address.count(":") == 1:
        return address.split(":", 1)[0]
    return address  # bare IPv4 or bare IPv6


def _has_port(entry: str) -> bool:
    if entry.startswith("["):
        return "]:" in entry
    return entry.count(":") == 1


def select_subset(endpoints: Sequence[EndpointView], subset: frozenset[str]) -> list[EndpointView]:
    """The endpoints of ``endpoints`` named by ``subset`` (possibly empty)."""
    exact = {e for e in subset if _has_port(e)}
    hosts = {host_of(e) for e in subset if not _has_port(e)}
    return [e for e in endpoints if e.address in exact or (hosts and host_of(e.address) in hosts)]
