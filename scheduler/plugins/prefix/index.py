"""Approximate prefix-cache index: which endpoint probably holds which prefix block.

Representation (chosen for lookup speed and memory, see docs/scheduler.md for the figures):

* ``owners: dict[int, int]``: block hash -> bitmask of endpoint slots (bit i = endpoint in slot i).
  Slots are small integers assigned per endpoint address and reused after removal.
* per slot, an exact LRU kept as ``held: dict[int, int]`` (hash -> number of copies in ``order``) and
  ``order: deque[int]`` (touch order, oldest left; a touch appends a copy, so older copies go stale).
  Eviction pops from the left and only drops a hash when its last copy leaves. When ``order`` grows
  beyond twice the capacity it is compacted to one copy per hash (amortised O(1) per touch). Counts
  are small ints (interned by CPython) and hash ints are shared with ``owners``, so an
  (endpoint, block) entry costs about 130 bytes at full capacity.
* Capacity: each endpoint holds at most ``capacity(address)`` hashes; an insert evicts the least
  recently used ones and clears the endpoint's bit from each evicted hash (the hash is dropped when no
  bit is left). The index never holds more than ``capacity`` hashes for an endpoint after a call.

``match(hashes)`` walks the request's chained hashes and returns, for every endpoint that holds the
first block, how many consecutive blocks from the start it holds: O(blocks) dict lookups and mask
ANDs, independent of the number of endpoints. Not thread-safe: call from the scheduler's thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

__all__ = ["PrefixIndex"]


class PrefixIndex:
    __slots__ = (
        "_addr",
        "_bits",
        "_cap",
        "_default_capacity",
        "_free",
        "_held",
        "_order",
        "_owners",
        "_slot",
    )

    def __init__(self, capacity_per_endpoint: int) -> None:
        if capacity_per_endpoint < 1:
            raise ValueError(f"capacity_per_endpoint must be >= 1, got {capacity_per_endpoint}")
        self._default_capacity = capacity_per_endpoint
        self._owners: dict[int, int] = {}
        self._slot: dict[str, int] = {}
        self._addr: list[str | None] = []
        self._bits: list[int] = []
        self._held: list[dict[int, int]] = []
        self._order: list[deque[int]] = []
        self._cap: list[int] = []
        self._free: list[int] = []

    # -- queries ------------------------------------------------------------------------------------

    def match(self, hashes: Sequence[int]) -> dict[str, int]:
        """Address -> number of consecutive blocks from the start held (only addresses holding >= 1)."""
        if not hashes:
            return {}
        owners = self._owners
        alive = owners.get(hashes[0], 0)
        if not alive:
            return {}
        out: dict[str, int] = {}
        addr = self._addr
        i = 1
        for h in hashes[1:]:
            held = owners.get(h, 0) & alive
            if held != alive:
                gone = alive ^ held
                while gone:
                    low = gone & -gone
                    out[addr[low.bit_length() - 1]] = i  # type: ignore[index]
                    gone ^= low
                alive = held
                if not alive:
                    return out
            i += 1
        while alive:
            low = alive & -alive
            out[addr[low.bit_length() - 1]] = i  # type: ignore[index]
            alive ^= low
        return out

    def entries(self, address: str) -> int:
        """How many hashes the index holds for ``address``."""
        slot = self._slot.get(address)
        return 0 if slot is None else len(self._held[slot])

    def capacity(self, address: str) -> int:
        slot = self._slot.get(address)
        return self._default_capacity if slot is None else self._cap[slot]

    def __contains__(self, address: object) -> bool:
        return address in self._slot

    def endpoint_count(self) -> int:
        return len(self._slot)

    def addresses(self) -> list[str]:
        return list(self._slot)

    def __len__(self) -> int:
        """Number of distinct hashes held by at least one endpoint."""
        return len(self._owners)

    def total_entries(self) -> int:
        """Number of (endpoint, hash) pairs."""
        return sum(len(held) for held in self._held)

    # -- updates ------------------------------------------------------------------------------------

    def set_capacity(self, address: str, capacity: int) -> None:
        """Change one endpoint's capacity (autotuning); evicts at once when it shrinks below the size."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        slot = self._slot_for(address)
        self._cap[slot] = capacity
        self._evict(slot)

    def insert(self, address: str, hashes: Iterable[int]) -> None:
        """Record that ``address`` now holds these blocks (the last one most recently used)."""
        slot = self._slot_for(address)
        bit = self._bits[slot]
        held = self._held[slot]
        order = self._order[slot]
        owners = self._owners
        append = order.append
        for h in hashes:
            copies = held.get(h)
            if copies is None:
                mask = owners.get(h)
                owners[h] = bit if mask is None else mask | bit
                held[h] = 1
            else:
                held[h] = copies + 1
            append(h)
        if len(held) > self._cap[slot] or len(order) > 2 * self._cap[slot] + 64:
            self._evict(slot)

    def remove(self, addresses: Iterable[str]) -> None:
        """Forget endpoints entirely (they left the pool); their slots are reused."""
        owners = self._owners
        for address in addresses:
            slot = self._slot.pop(address, None)
            if slot is None:
                continue
            clear = ~self._bits[slot]
            for h in self._held[slot]:
                left = owners[h] & clear
                if left:
                    owners[h] = left
                else:
                    del owners[h]
            self._held[slot] = {}
            self._order[slot] = deque()
            self._addr[slot] = None
            self._free.append(slot)

    def clear(self) -> None:
        self.remove(list(self._slot))

    # -- internals ----------------------------------------------------------------------------------

    def _slot_for(self, address: str) -> int:
        slot = self._slot.get(address)
        if slot is not None:
            return slot
        if self._free:
            slot = self._free.pop()
            self._addr[slot] = address
            self._cap[slot] = self._default_capacity
        else:
            slot = len(self._addr)
            self._addr.append(address)
            self._bits.append(1 << slot)
            self._held.append({})
            self._order.append(deque())
            self._cap.append(self._default_capacity)
        self._slot[address] = slot
        return slot

    def _evict(self, slot: int) -> None:
        """Evict least recently used hashes down to capacity; compact ``order`` when it is too long."""
        held = self._held[slot]
        order = self._order[slot]
        cap = self._cap[slot]
        owners = self._owners
        clear = ~self._bits[slot]
        popleft = order.popleft
        while len(held) > cap:
            h = popleft()
            copies = held[h]
            if copies > 1:
                held[h] = copies - 1
                continue
            del held[h]
            left = owners[h] & clear
            if left:
                owners[h] = left
            else:
                del owners[h]
        if len(order) > 2 * cap + 64:
            # keep only the latest copy of each hash, in touch order (C-level passes over ``order``)
            latest = list(dict.fromkeys(reversed(order)))
            latest.reverse()
            self._order[slot] = deque(latest)
            self._held[slot] = dict.fromkeys(latest, 1)
