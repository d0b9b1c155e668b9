"""Replica sync (pyepp): the interface between a plugin whose decisions depend on per-replica state and
the transport that shares that state between active-active picker replicas.

Behind one Envoy the ext_proc streams are spread over the replicas, so each replica dispatches only
its share of the requests. A plugin that remembers its own dispatches (``prefix-affinity-scorer``:
who owns a prefix, where a new prefix was placed, how many requests it has in flight per endpoint)
then decides on a partial view, and two replicas give the same new prefix different owners. A plugin
implementing :class:`ReplicaSynced` lets the replicas behave as one:

* when it records a *new* ownership it hands an :class:`OwnershipClaim` to the
  :class:`ReplicaSyncSink` it was attached to; every peer applies the claim with
  :meth:`ReplicaSynced.apply_remote_ownership` (deterministic conflict rule: replicas that placed the
  same new prefix on different endpoints at the same moment converge on the same owners);
* the transport reads :meth:`ReplicaSynced.replica_loads` periodically and each peer applies it with
  :meth:`ReplicaSynced.apply_remote_loads`: load bounds use this replica's in-flight counts plus
  every live peer's latest ones (a peer's counts expire ``ttl`` seconds after they arrived).

The scheduler package defines only this interface; the transport (authenticated UDP datagrams) lives
in ``epp.sync`` and is attached by the composition root. Claims are applied on the scheduler's
event-loop thread (no locking), never re-sent (no echo), and a plugin validates nothing the
transport already checked (the endpoint addresses are in the current pool).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["MAX_ANCHORS", "MAX_PEERS", "OwnershipClaim", "PeerLoads", "ReplicaSyncSink", "ReplicaSynced"]

MAX_PEERS = 64
"""The most peer replicas whose in-flight counts a plugin keeps."""

MAX_ANCHORS = 64
"""The most anchors one claim carries (a prompt of 65,536 blocks has 61)."""


@dataclass(frozen=True, slots=True)
class OwnershipClaim:
    """``address`` became an owner of a prompt's anchors on the sending replica.

    ``key``: the prompt's first block hash (the rendezvous key of the conflict rule, the placement's
    key). ``anchors``: ``(anchor hash, created)`` for every anchor whose owners changed; ``created``
    when the sender had no owner there (a primary claim), else ``address`` was added as a spill owner.
    ``placement``: the weight of a new placement recorded on ``key`` (0: none)."""

    address: str
    key: int
    anchors: tuple[tuple[int, bool], ...]
    placement: int = 0


class ReplicaSyncSink(Protocol):
    """Where a plugin sends the ownerships it records (the transport; batched, non-blocking)."""

    def ownership(self, plugin: str, claim: OwnershipClaim) -> None: ...


@runtime_checkable
class ReplicaSynced(Protocol):
    """A plugin whose per-replica state the replicas share (see the module docstring)."""

    @property
    def name(self) -> str: ...

    def attach_replica_sync(self, sink: ReplicaSyncSink) -> None:
        """Start sending new ownerships to ``sink``."""
        ...

    def replica_loads(self) -> dict[str, int]:
        """This replica's own requests in flight per endpoint address (no peer's)."""
        ...

    def apply_remote_ownership(self, claim: OwnershipClaim) -> None:
        """Record a peer's claim (not re-sent)."""
        ...

    def apply_remote_loads(self, peer: int, counts: Mapping[str, int], ttl: float) -> None:
        """``peer``'s in-flight counts now (they replace its previous ones) for the next ``ttl`` seconds."""
        ...


class PeerLoads:
    """The live peers' in-flight counts per endpoint, summed; a peer's counts replace its previous ones
    and expire ``ttl`` seconds after they arrived. Bounded: :data:`MAX_PEERS` peers (beyond, the one
    expiring first is dropped), each with the counts it sent (the transport keeps only pool addresses)."""

    __slots__ = ("_clock", "_earliest", "_peers", "remote")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._peers: dict[int, tuple[float, dict[str, int]]] = {}  # peer -> (expires, counts)
        self.remote: dict[str, int] = {}  # the live peers' counts, summed per address
        self._earliest = math.inf

    def __len__(self) -> int:
        return len(self._peers)

    def apply(self, peer: int, counts: Mapping[str, int], ttl: float) -> None:
        peers = self._peers
        if peer not in peers and len(peers) >= MAX_PEERS:
            peers.pop(min(peers, key=lambda p: peers[p][0]))
        peers[peer] = (self._clock() + ttl, {a: c for a, c in counts.items() if c > 0})
        self._sum()

    def forget(self, addresses: frozenset[str]) -> None:
        """Endpoints that left the pool stop counting."""
        for _expires, counts in self._peers.values():
            for address in addresses:
                counts.pop(address, None)
        if self._peers:
            self._sum()

    def merged(self, own: Mapping[str, int]) -> Mapping[str, int]:
        """``own`` plus the live peers' counts (``own`` itself when no peer counts)."""
        if not self._peers:
            return own
        if self._clock() > self._earliest:
            self._sum()
        if not self.remote:
            return own
        out = dict(self.remote)
        for address, count in own.items():
            out[address] = out.get(address, 0) + count
        return out

    def _sum(self) -> None:
        now = self._clock()
        remote: dict[str, int] = {}
        earliest = math.inf
        for peer, (expires, counts) in list(self._peers.items()):
            if expires < now:
                del self._peers[peer]
                continue
            earliest = min(earliest, expires)
            for address, count in counts.items():
                remote[address] = remote.get(address, 0) + count
        self.remote, self._earliest = remote, earliest
