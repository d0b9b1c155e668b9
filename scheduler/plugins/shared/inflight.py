"""In-flight accounting per endpoint, fed by the dispatch / completion lifecycle hooks.

Used by ``active-request-scorer``, ``token-load-scorer``, ``concurrency-detector`` and
``prefix-cache-affinity-filter``: each plugin instance owns one :class:`InflightTracker`, fed by the
hooks of :class:`~scheduler.plugins.shared.inflight_hooks.InflightHooks`. The tracker keeps, per
request id, which endpoints the request was counted against and how many tokens it holds, and per
endpoint the running sums.

Contract:

* ``dispatch`` counts a request once; a second ``dispatch`` with the same request id is ignored.
* ``complete`` uncounts it once; a second ``complete`` (a completion reported twice) is a no-op.
  Completion always uncounts exactly what the dispatch counted, so the sums never drift.
* ``move`` re-attributes a request to the endpoint that actually served it (the proxy reported
  that a fallback served), so counts follow the real load.
* Entries older than ``timeout`` seconds (a completion that never came) are dropped lazily on the
  next ``dispatch``: requests are kept in dispatch order, so expiry pops from the front, O(1)
  amortised.
* A request may carry a *key* (``prefix-affinity-scorer`` gives the hash of the prompt's first block):
  ``key_counts[(key, address)]`` counts the keyed requests in flight per primary endpoint, and follows
  ``move``, ``complete``, expiry and ``forget`` with the primary count (one per-request map for both).
* Every operation is O(1) in the number of in-flight requests (``add_tokens`` is the per-chunk
  path). Not thread-safe: hooks run on the caller's event-loop thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from scheduler.types import SchedulingResult

__all__ = ["InflightTracker", "add_load", "dispatch_targets"]


class _Entry:
    """Mutable bookkeeping for one in-flight request (internal)."""

    __slots__ = ("addresses", "deadline", "key", "tokens")

    def __init__(self, addresses: list[str], tokens: int, deadline: float, key: int | None) -> None:
        self.addresses = addresses
        self.tokens = tokens
        self.deadline = deadline
        self.key = key  # counted in key_counts against addresses[0] (None: not keyed)


def dispatch_targets(result: SchedulingResult, *, every_profile: bool) -> list[str]:
    """The addresses a dispatch is counted against.

    With ``every_profile`` the first target of every routed profile result (decode and prefill
    in P/D), otherwise only the primary endpoint. Shadow profiles are never counted.
    """
    if not every_profile:
        return [result.endpoints[0].address] if result.endpoints else []
    out: list[str] = []
    for profile_result in result.profile_results.values():
        if profile_result.shadow or not profile_result.targets:
            continue
        address = profile_result.targets[0].endpoint.address
        if address not in out:
            out.append(address)
    return out


def add_load(
    request_counts: dict[str, int], token_counts: dict[str, int], address: str, requests: int, tokens: int
) -> None:
    """Add ``requests`` and ``tokens`` (either may be negative) to ``address``'s counters; an endpoint
    whose request count drops to zero leaves both maps (so they hold only endpoints with load)."""
    count = request_counts.get(address, 0) + requests
    if count <= 0:
        request_counts.pop(address, None)
        token_counts.pop(address, None)
        return
    request_counts[address] = count
    held = token_counts.get(address, 0) + tokens
    token_counts[address] = held if held > 0 else 0  # max(0, held), without the builtin's call cost


class InflightTracker:
    """Requests and tokens in flight per endpoint address (and keyed requests per (key, address))."""

    __slots__ = ("_clock", "_entries", "_requests", "_timeout", "_tokens", "key_counts")

    def __init__(self, clock: Callable[[], float], timeout: float) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._clock = clock
        self._timeout = timeout
        self._entries: dict[str, _Entry] = {}
        self._requests: dict[str, int] = {}
        self._tokens: dict[str, int] = {}
        self.key_counts: dict[tuple[int, str], int] = {}
        """(key, primary address) -> keyed requests in flight (live; read-only by convention)."""

    def requests(self, address: str) -> int:
        """Requests currently counted against ``address``."""
        return self._requests.get(address, 0)

    def tokens(self, address: str) -> int:
        """Tokens currently counted against ``address``."""
        return self._tokens.get(address, 0)

    @property
    def request_counts(self) -> dict[str, int]:
        """The live per-address request counts (read-only by convention; hot-path access)."""
        return self._requests

    @property
    def token_counts(self) -> dict[str, int]:
        """The live per-address token counts (read-only by convention; hot-path access)."""
        return self._tokens

    def __len__(self) -> int:
        return len(self._entries)

    def dispatch(
        self, request_id: str, addresses: Iterable[str], tokens: int = 0, key: int | None = None
    ) -> None:
        """Count the request against ``addresses`` (the first is its primary endpoint) and, with a
        ``key``, against ``(key, primary)`` in :attr:`key_counts`."""
        now = self._clock()
        self._expire(now)  # first: an id whose entry has expired counts afresh
        entries = self._entries
        if request_id in entries:
            return
        targets = list(dict.fromkeys(addresses))
        if not targets:
            return
        if tokens < 0:
            tokens = 0
        for address in targets:
            add_load(self._requests, self._tokens, address, 1, tokens)
        if key is not None:
            self._count_key((key, targets[0]), 1)
        entries[request_id] = _Entry(targets, tokens, now + self._timeout, key)

    def add_tokens(self, request_id: str, n: int) -> None:
        """Add ``n`` observed tokens (e.g. output) to an in-flight request; unknown ids are ignored."""
        entry = self._entries.get(request_id)
        if entry is None or n <= 0:
            return
        entry.tokens += n
        tokens = self._tokens
        for address in entry.addresses:
            tokens[address] = tokens.get(address, 0) + n

    def move(self, request_id: str, served: str) -> None:
        """Re-attribute the request's primary count to ``served`` (a fallback served it)."""
        entry = self._entries.get(request_id)
        if entry is None or not served or not entry.addresses or entry.addresses[0] == served:
            return
        primary = entry.addresses[0]
        if entry.key is not None:
            self._count_key((entry.key, primary), -1)
            self._count_key((entry.key, served), 1)
        if served in entry.addresses:  # already counted there (e.g. P/D): just drop the primary
            self._add(entry.addresses.pop(0), -1, -entry.tokens)
            return
        self._add(primary, -1, -entry.tokens)
        entry.addresses[0] = served
        self._add(served, 1, entry.tokens)

    def complete(self, request_id: str) -> bool:
        """Uncount the request; False when it was not (or no longer) in flight."""
        entry = self._entries.pop(request_id, None)
        if entry is None:
            return False
        requests, tokens = self._requests, self._tokens
        for address in entry.addresses:
            add_load(requests, tokens, address, -1, -entry.tokens)
        if entry.key is not None and entry.addresses:
            self._count_key((entry.key, entry.addresses[0]), -1)
        return True

    def forget(self, addresses: Iterable[str]) -> None:
        """Drop the counters of endpoints that left the pool (their requests stop counting)."""
        gone = set(addresses)
        for address in gone:
            self._requests.pop(address, None)
            self._tokens.pop(address, None)
        for entry in self._entries.values():
            if gone.intersection(entry.addresses):
                if entry.key is not None and entry.addresses[0] in gone:
                    self.key_counts.pop((entry.key, entry.addresses[0]), None)
                    entry.key = None  # its primary left: the key no longer counts anywhere
                entry.addresses = [a for a in entry.addresses if a not in gone]

    def _add(self, address: str, requests: int, tokens: int) -> None:
        add_load(self._requests, self._tokens, address, requests, tokens)

    def _count_key(self, slot: tuple[int, str], n: int) -> None:
        count = self.key_counts.get(slot, 0) + n
        if count <= 0:
            self.key_counts.pop(slot, None)
        else:
            self.key_counts[slot] = count

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries:
            request_id = next(iter(entries))
            if entries[request_id].deadline > now:
                return
            self.complete(request_id)
