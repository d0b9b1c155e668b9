"""Prefix ownership: which endpoints a prefix is *assigned* to, kept independently of any KV cache.

The approximate index (:mod:`scheduler.plugins.prefix.index`) estimates what each server *holds*; it is
sized to the servers' KV capacity and forgets a prefix when the server probably evicted it. Ownership is
the routing decision that placed the prefix, remembered for far longer: when a server evicts a group's
prefix, the group's next request still goes to its owner (which re-caches it once) instead of wherever
load says, so a group does not spread over the fleet and every server's cache holds fewer distinct
prefixes. That is what keeps hit rates up when caches churn.

Representation:

* A prompt's chained block hashes ``h_1 .. h_n`` (:mod:`scheduler.plugins.prefix.hashing`; ``h_d``
  identifies the whole prefix of ``d`` blocks) are recorded only at *anchor* depths
  (:func:`anchor_depths`): every depth up to 8, then four per doubling (10, 12, 14, 16, 20, 24, 28,
  32, 40, ...), and the prompt's last block. A prompt of ``n`` blocks costs at most
  ``8 + 4·log2(n/8) + 1`` entries (28 for 256 blocks) instead of ``n``; the deepest shared anchor
  under-reports a shared prefix by less than a quarter.
* ``entries: OrderedDict[int, tuple[str, ...]]``: anchor hash -> owners, in the order they were
  assigned (the first is the *primary*; later ones are *spill* owners added when every earlier owner
  was over its load bound). At most ``max_owners`` per entry; a new owner beyond that replaces the
  most recent spill owner, so the primary never changes while it lives. Owner tuples are interned
  (a handful of distinct tuples exist), so an entry costs one int, one dict slot and one ordered-dict
  link: :data:`ENTRY_BYTES` at most (measured, ``tests/scheduler/plugins/test_prefix_affinity_scorer.py``).
* LRU over entries: a lookup does not touch; a record touches every anchor of the prompt. Beyond
  ``max_entries`` (the memory budget divided by :data:`ENTRY_BYTES`) the least recently recorded
  entries are dropped. The budget is bytes, not the servers' KV size: ownership outlives the cache.

``lookup(hashes)`` returns the deepest anchor of the prompt that has owners, as ``(depth, owners)``;
O(number of anchors) dict lookups. Not thread-safe: call from the scheduler's thread.

Replica sync (:mod:`scheduler.replica_sync`): ``record`` can list the anchors it changed, and
``apply_remote`` records a peer's change with a deterministic conflict rule. A *created* anchor (the
peer had no owner there: it placed a new prefix) whose local primary differs is a race between
replicas that placed the same new prefix at the same moment: the primary becomes whichever of the two
has the higher rendezvous weight for the prompt's first block hash
(:func:`~scheduler.plugins.prefix.rendezvous.weight`) and the other stays as a spill owner if there is
room, so both replicas end with the same owners whatever order the claims arrive in. A spill (the peer
added an owner to an anchor it already had) is recorded as a local spill is, except when it meets a
full entry whose newest spill owner changed here within :data:`SPILL_RACE_SECONDS` (both replicas
spilled the same prefix at the same moment, to different endpoints): then the overflow slot keeps
whichever of the two has the higher rendezvous weight, on both replicas. The spill changes of that
window are remembered per anchor (at most :data:`RECENT_LIMIT`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache

from scheduler.plugins.prefix.rendezvous import weight

__all__ = ["ENTRY_BYTES", "RECENT_LIMIT", "SPILL_RACE_SECONDS", "OwnerTable", "anchor_depths", "outranks"]

ENTRY_BYTES = 160
"""Upper bound of the memory one ownership entry costs (measured ~140 B with interned owner tuples)."""

_INTERN_LIMIT = 4096
SPILL_RACE_SECONDS = 0.1
"""How long after a spill owner changed a peer's different spill for the same anchor counts as a race."""
RECENT_LIMIT = 4096
"""Anchors whose spill owner changed recently, remembered for the race rule (oldest dropped first)."""


@lru_cache(maxsize=512)
def anchor_depths(n: int) -> tuple[int, ...]:
    """The anchor depths (1-based block counts) recorded for a prompt of ``n`` full blocks, ascending."""
    if n <= 0:
        return ()
    out = list(range(1, min(n, 8) + 1))
    step, depth = 2, 8
    while True:
        depth += step
        if depth > n:
            break
        out.append(depth)
        if depth & (depth - 1) == 0:  # a power of two: the next octave has steps twice as long
            step *= 2
    if out[-1] != n:
        out.append(n)
    return tuple(out)


class OwnerTable:
    """Anchor hash -> owner endpoints, LRU-bounded to ``max_entries``."""

    __slots__ = ("_entries", "_intern", "_recent", "max_entries", "max_owners")

    def __init__(self, max_entries: int, max_owners: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        if max_owners < 1:
            raise ValueError(f"max_owners must be >= 1, got {max_owners}")
        self.max_entries = max_entries
        self.max_owners = max_owners
        self._entries: OrderedDict[int, tuple[str, ...]] = OrderedDict()
        self._intern: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._recent: OrderedDict[int, float] = OrderedDict()  # anchor -> when its spill owner changed

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> Iterator[tuple[int, tuple[str, ...]]]:
        """Every (anchor hash, owners), least recently recorded first."""
        return iter(self._entries.items())

    def owners(self, anchor_hash: int) -> tuple[str, ...]:
        return self._entries.get(anchor_hash, ())

    def lookup(self, hashes: Sequence[int]) -> tuple[int, tuple[str, ...]]:
        """``(depth, owners)`` of the deepest anchor of ``hashes`` that has owners; ``(0, ())`` if none."""
        get = self._entries.get
        for depth in reversed(anchor_depths(len(hashes))):
            found = get(hashes[depth - 1])
            if found:
                return depth, found
        return 0, ()

    def record(
        self,
        hashes: Sequence[int],
        address: str,
        changes: list[tuple[int, bool]] | None = None,
        now: float | None = None,
    ) -> None:
        """``address`` now serves this prompt: make it an owner of every anchor of ``hashes``.
        ``changes``, when given, receives ``(anchor hash, created)`` for every anchor whose owners
        changed (``created``: it had none); ``now`` (replica sync) remembers the spill changes for
        the race rule."""
        entries = self._entries
        touch = entries.move_to_end
        for depth in anchor_depths(len(hashes)):
            h = hashes[depth - 1]
            found = entries.get(h)
            if found is None:
                entries[h] = self._interned((address,))
                if changes is not None:
                    changes.append((h, True))
            else:
                if address not in found:
                    entries[h] = self._interned(self._spilled(found, address))
                    if changes is not None:
                        changes.append((h, False))
                    if now is not None:
                        self._mark(h, now)
                touch(h)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def apply_remote(
        self, key: int, anchors: Iterable[tuple[int, bool]], address: str, now: float | None = None
    ) -> None:
        """A peer replica made ``address`` an owner of ``anchors`` (``(hash, created)``); ``key`` is
        the prompt's first block hash. The conflict rules of the module docstring (the spill race
        only with ``now``)."""
        entries = self._entries
        touch = entries.move_to_end
        for h, created in anchors:
            found = entries.get(h)
            if found is None:
                entries[h] = self._interned((address,))
                continue
            if found[0] != address:
                if created and outranks(key, address, found[0]):
                    found = (address, *[a for a in found if a != address])[: self.max_owners]
                elif address in found:
                    pass
                elif created:  # it lost the race: a spill owner if there is room
                    if len(found) < self.max_owners:
                        found = (*found, address)
                        self._mark(h, now)
                elif len(found) < self.max_owners or not self._raced(h, now):
                    found = self._spilled(found, address)
                    self._mark(h, now)
                elif outranks(key, address, found[-1]):  # raced spills: the higher weight keeps the slot
                    found = (*found[:-1], address)
                entries[h] = self._interned(found)
            touch(h)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def _mark(self, h: int, now: float | None) -> None:
        if now is None:
            return
        recent = self._recent
        recent[h] = now
        recent.move_to_end(h)
        while len(recent) > RECENT_LIMIT:
            recent.popitem(last=False)

    def _raced(self, h: int, now: float | None) -> bool:
        if now is None:
            return False
        changed = self._recent.get(h)
        return changed is not None and now - changed <= SPILL_RACE_SECONDS

    def _spilled(self, found: tuple[str, ...], address: str) -> tuple[str, ...]:
        """``found`` with the spill owner ``address`` added (not in ``found``)."""
        if len(found) < self.max_owners:
            return (*found, address)
        # the overflow slot: replace the most recent spill owner, keep the primary
        return (*found[:-1], address) if len(found) > 1 else (address,)

    def remove(self, addresses: Iterable[str]) -> None:
        """Forget endpoints that left the pool (O(entries); pool changes are rare)."""
        gone = set(addresses)
        if not gone:
            return
        self._intern.clear()
        entries = self._entries
        for h, owners in list(entries.items()):
            if gone.isdisjoint(owners):
                continue
            kept = tuple(a for a in owners if a not in gone)
            if kept:
                entries[h] = self._interned(kept)
            else:
                del entries[h]

    def clear(self) -> None:
        self._entries.clear()
        self._intern.clear()
        self._recent.clear()

    def _interned(self, owners: tuple[str, ...]) -> tuple[str, ...]:
        found = self._intern.get(owners)
        if found is None:
            if len(self._intern) >= _INTERN_LIMIT:
                self._intern.clear()
            found = self._intern[owners] = owners
        return found


def outranks(key: int, address: str, other: str) -> bool:
    """True when ``address`` has the higher rendezvous weight for ``key`` than ``other`` (ties, 2^-64
    likely, broken by the address), the same on every replica."""
    return (weight(key, address), address) > (weight(key, other), other)
