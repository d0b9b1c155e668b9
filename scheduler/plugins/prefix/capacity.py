"""Per-endpoint capacities of the prefix index under a per-endpoint and a pool-wide memory budget.

For an endpoint e among the n endpoints the index currently holds::

    own(e)       = autotuned capacity (num_gpu_blocks x server block size / index block size) when the
                   endpoint reports its cache, else lruCapacityPerServer; at most
                   maxIndexBytesPerServer / ENTRY_BYTES
    share        = max(maxPrefixBlocksToMatch, maxIndexBytes / ENTRY_BYTES / n)
    capacity(e)  = min(own(e), share)

so the whole index stays within ``maxIndexBytes`` however many endpoints join (each endpoint can
still hold one full prompt), and capacities grow back when endpoints leave. Capacities are
recomputed only when the set of endpoints changes or an endpoint's own capacity changes: after every
call, each endpoint the index holds has ``capacity(e)`` (the index's endpoints change only through
:meth:`CapacityPlanner.admit` and :meth:`CapacityPlanner.removed`, or all at once when it is cleared),
so admitting a held endpoint with no new own capacity, the per-dispatch case, changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.plugins.prefix.index import PrefixIndex

__all__ = ["CapacityPlanner"]


class CapacityPlanner:
    __slots__ = ("_default", "_floor", "_index", "_max_own", "_own", "_total")

    def __init__(
        self, index: PrefixIndex, default_capacity: int, max_own: int, total_entries: int, floor: int
    ) -> None:
        self._index = index
        self._default = min(default_capacity, max_own)
        self._max_own = max_own
        self._total = total_entries
        self._floor = floor
        self._own: dict[str, int] = {}

    def share(self, endpoints: int) -> int:
        return max(self._floor, self._total // max(1, endpoints))

    def capacity(self, address: str, endpoints: int) -> int:
        return max(1, min(self._own.get(address, self._default), self.share(endpoints)))

    def admit(self, address: str, own: int | None = None) -> None:
        """Call before inserting for ``address``; ``own`` is its autotuned capacity, if known."""
        index = self._index
        if own is None and address in index:
            return  # its capacity is already capacity(address) (module docstring)
        if own is not None:
            self._own[address] = max(1, min(own, self._max_own))
        if address not in index:
            index.set_capacity(address, self._default)  # creates the slot
            self._rebalance()
        else:
            wanted = self.capacity(address, index.endpoint_count())
            if wanted != index.capacity(address):
                index.set_capacity(address, wanted)

    def removed(self, addresses: Iterable[str]) -> None:
        for address in addresses:
            self._own.pop(address, None)
        self._rebalance()

    def _rebalance(self) -> None:
        index = self._index
        members = index.addresses()
        for address in members:
            wanted = self.capacity(address, len(members))
            if wanted != index.capacity(address):
                index.set_capacity(address, wanted)
