"""Requests in flight per (prefix, endpoint): how much of an endpoint's load one prefix makes.

``prefix-affinity-scorer`` reads it to tell a *hot prefix* (the prefix itself fills its owner, so
a second server must take some of it) from a *burst of other prefixes* at the owner (the owner is busy
with other groups for a moment: moving this prefix would copy it into a second cache for nothing).

``dispatch(request_id, key, address)`` counts a request once against ``(key, address)``; ``complete``
uncounts it once; ``move`` follows a fallback that served; entries older than ``timeout`` (a
completion that never came) are dropped on the next dispatch, in dispatch order (O(1) amortised), so
the maps hold at most the requests dispatched within ``timeout``. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["PrefixInflight"]


class PrefixInflight:
    """``(prefix key, address) -> requests in flight``, fed by the dispatch / completion hooks."""

    __slots__ = ("_clock", "_entries", "_timeout", "counts")

    def __init__(self, clock: Callable[[], float], timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._clock = clock
        self._timeout = timeout
        self._entries: dict[str, tuple[int, str, float]] = {}  # request id -> (key, address, deadline)
        self.counts: dict[tuple[int, str], int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def dispatch(self, request_id: str, key: int, address: str) -> None:
        now = self._clock()
        self._expire(now)
        if request_id in self._entries:
            return
        self._entries[request_id] = (key, address, now + self._timeout)
        self._add((key, address), 1)

    def complete(self, request_id: str) -> bool:
        entry = self._entries.pop(request_id, None)
        if entry is None:
            return False
        self._add((entry[0], entry[1]), -1)
        return True

    def move(self, request_id: str, served: str) -> None:
        entry = self._entries.get(request_id)
        if entry is None or entry[1] == served:
            return
        key, address, deadline = entry
        self._add((key, address), -1)
        self._add((key, served), 1)
        self._entries[request_id] = (key, served, deadline)

    def forget(self, addresses: Iterable[str]) -> None:
        gone = set(addresses)
        for request_id, (key, address, _) in list(self._entries.items()):
            if address in gone:
                del self._entries[request_id]
                self.counts.pop((key, address), None)

    def _add(self, slot: tuple[int, str], n: int) -> None:
        count = self.counts.get(slot, 0) + n
        if count <= 0:
            self.counts.pop(slot, None)
        else:
            self.counts[slot] = count

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries:
            request_id = next(iter(entries))
            if entries[request_id][2] > now:
                return
            self.complete(request_id)
