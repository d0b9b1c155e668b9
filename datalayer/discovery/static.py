"""Static discovery: a fixed list of endpoints (``--endpoints host:port,...``), optionally labelled.

The list is reported once, then the source idles until cancelled. An address is ``ip:port``
(``10.0.0.1:8000``, ``[fd00::1]:8000``) or ``name:port``; names are resolved by wrapping this source
in :class:`~datalayer.discovery.resolving.ResolvingDiscovery` (the ``epp`` wiring does), since the
destination written to the proxy must be an IP address.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from datalayer.discovery.base import DiscoverySink, SpecTracker, make_spec, split_address
from datalayer.records import EndpointSpec

__all__ = ["StaticDiscovery", "parse_endpoint_list"]


def parse_endpoint_list(text: str) -> tuple[str, ...]:
    """``"a:1,b:2"`` -> ``("a:1", "b:2")``; raises ValueError for a malformed or duplicate item."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items:
        raise ValueError("expected at least one host:port")
    for item in items:
        split_address(item)
    if len(set(items)) != len(items):
        raise ValueError(f"duplicate endpoint in {text!r}")
    return items


class StaticDiscovery:
    def __init__(self, specs: Sequence[EndpointSpec]) -> None:
        addresses = [s.address for s in specs]
        if len(set(addresses)) != len(addresses):
            raise ValueError("static discovery: duplicate endpoint address")
        self.specs = tuple(specs)

    @classmethod
    def from_addresses(
        cls, addresses: Sequence[str], labels: Mapping[str, str] | None = None
    ) -> StaticDiscovery:
        """One endpoint per ``host:port`` (validated), all carrying ``labels``; named by address."""
        for address in addresses:
            split_address(address)
        return cls([make_spec(a, labels=labels) for a in addresses])

    async def run(self, sink: DiscoverySink) -> None:
        sink.apply(SpecTracker(sink.current()).update(self.specs))
        sink.mark_synced()
        await asyncio.Event().wait()
