"""The discovery contract: a source of endpoint add / update / remove events.

A :class:`Discovery` runs (``await run(sink)``) until cancelled. It reports changes to the sink as
batches of :class:`~datalayer.records.DiscoveryEvent` and calls ``sink.mark_synced()`` once its first
complete listing has been applied (the picker reports healthy only after that). Sources that know the
full desired set at each step use :class:`SpecTracker` to turn successive sets into events.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from datalayer.engines import DEFAULT_ENGINE
from datalayer.records import (
    ENGINE_LABEL,
    LLMD_ENGINE_LABEL,
    DiscoveryEvent,
    EndpointSpec,
    EventKind,
    frozen_mapping,
)

__all__ = [
    "Discovery",
    "DiscoverySink",
    "SpecTracker",
    "is_ip_literal",
    "join_address",
    "make_spec",
    "split_address",
]

# RFC 1123 host names (underscores allowed: container and compose service names use them).
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}\.?$){_LABEL}(?:\.{_LABEL})*\.?")


class DiscoverySink(Protocol):
    def apply(self, events: Sequence[DiscoveryEvent]) -> None:
        """Apply one batch of changes atomically (one new snapshot)."""
        ...

    def mark_synced(self) -> None:
        """The first complete listing has been applied. Idempotent."""
        ...

    def current(self) -> Mapping[str, EndpointSpec]:
        """The endpoint set the sink holds now (a source restarted after a crash diffs against it)."""
        ...


@runtime_checkable
class Discovery(Protocol):
    async def run(self, sink: DiscoverySink) -> None:
        """Report the endpoint set to ``sink`` until cancelled. Must not raise on bad input it can
        recover from (a broken file, a dropped watch): log once and keep the last good set."""
        ...


def is_ip_literal(host: str) -> bool:
    """True for an IPv4 or IPv6 address (unbracketed), False for a host name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def join_address(ip: str, port: int) -> str:
    """``ip:port``, IPv6 bracketed (``[fd00::1]:8000``): the form Envoy parses as a destination."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); host is an IPv4 address, a host name, or ``[IPv6]``.

    Raises ValueError naming the problem. A host name is not resolved here (see
    :mod:`datalayer.discovery.resolve`).
    """
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host or not is_ip_literal(host):
            raise ValueError(f"expected an IPv6 address inside the brackets, got {address!r}")
    elif ":" in host:
        raise ValueError(f"IPv6 addresses must be bracketed, got {address!r}")
    elif not is_ip_literal(host):
        if not _HOST_NAME.fullmatch(host):
            raise ValueError(f"expected an IP address or a host name before the port, got {address!r}")
        if host.rstrip(".").rpartition(".")[2].isdigit():
            raise ValueError(f"not a valid IPv4 address, got {address!r}")
    return host, int(port)


def make_spec(
    address: str,
    name: str = "",
    labels: Mapping[str, str] | None = None,
    *,
    pod_name: str = "",
    node_address: str = "",
    metrics_host: str = "",
) -> EndpointSpec:
    """An :class:`EndpointSpec` with the engine taken from the engine-type label: llm-d-router's
    ``llm-d.ai/engine-type``, else GIE's ``inference.networking.k8s.io/engine-type``, else vllm (the
    core extractor's defaults; its ``engineLabelKey`` / ``defaultEngine`` decide which mapping applies)."""
    frozen = frozen_mapping(labels)
    return EndpointSpec(
        address=address,
        name=name or address,
        labels=frozen,
        engine=frozen.get(LLMD_ENGINE_LABEL) or frozen.get(ENGINE_LABEL) or DEFAULT_ENGINE,
        pod_name=pod_name,
        node_address=node_address,
        metrics_host=metrics_host,
    )


class SpecTracker:
    """Remembers the last endpoint set and turns a new full set into the events that lead to it.

    Seed it with the sink's current set (``SpecTracker(sink.current())``) so that a source restarted
    after a crash also removes endpoints that vanished meanwhile.
    """

    def __init__(self, initial: Mapping[str, EndpointSpec] | None = None) -> None:
        self._current: dict[str, EndpointSpec] = dict(initial or {})

    @property
    def current(self) -> Mapping[str, EndpointSpec]:
        return self._current

    def update(self, specs: Iterable[EndpointSpec]) -> list[DiscoveryEvent]:
        new = {s.address: s for s in specs}
        events = [DiscoveryEvent(EventKind.REMOVED, s) for a, s in self._current.items() if a not in new]
        for address, spec in new.items():
            old = self._current.get(address)
            if old is None:
                events.append(DiscoveryEvent(EventKind.ADDED, spec))
            elif old != spec:
                events.append(DiscoveryEvent(EventKind.UPDATED, spec))
        self._current = new
        return events
