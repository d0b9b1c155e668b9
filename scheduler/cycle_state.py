"""Per-request, typed key/value store shared by the plugins of one scheduling cycle.

Keys are :class:`StateKey` objects carrying the value type, so reads are typed without casts::

    PREFIX_MATCHES = StateKey[PrefixMatch]("prefix-cache-scorer/matches")
    cycle.write(PREFIX_MATCHES, matches)
    matches = cycle.read(PREFIX_MATCHES)      # -> PrefixMatch | None

A CycleState is created by the scheduler for each request and discarded after it. It is not
thread-safe (a cycle runs on one thread). ``now`` is the monotonic time at the start of the cycle,
so every plugin of the cycle judges staleness against the same instant. :meth:`CycleState.addresses`
gives the addresses of the candidates the plugins are called with, computed once for the cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

if TYPE_CHECKING:
    from scheduler.types import EndpointView

__all__ = ["CycleState", "StateKey"]

T = TypeVar("T")


class StateKey(Generic[T]):
    """A typed key. Identity is the object itself; ``name`` is for debugging."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


class CycleState:
    __slots__ = ("_addresses", "_data", "now")

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self._data: dict[StateKey[Any], Any] = {}
        self._addresses: tuple[Sequence[EndpointView], tuple[str, ...]] | None = None

    def addresses(self, endpoints: Sequence[EndpointView]) -> tuple[str, ...]:
        """The addresses of ``endpoints``, in order; the scorers of a profile run get the same sequence,
        so they are read once per cycle (the last sequence asked about is remembered)."""
        memo = self._addresses
        if memo is not None and memo[0] is endpoints:
            return memo[1]
        addresses = tuple([e.address for e in endpoints])
        self._addresses = (endpoints, addresses)
        return addresses

    def write(self, key: StateKey[T], value: T) -> None:
        self._data[key] = value

    @overload
    def read(self, key: StateKey[T]) -> T | None: ...
    @overload
    def read(self, key: StateKey[T], default: T) -> T: ...
    def read(self, key: StateKey[T], default: T | None = None) -> T | None:
        return self._data.get(key, default)

    def __contains__(self, key: StateKey[Any]) -> bool:
        return key in self._data
