"""Which endpoints are slower than the fleet, and how much of the traffic each one gets.

``prefix-affinity-scorer`` keeps a prefix on its owner; on a fleet of unequal servers (a slower GPU
generation beside faster ones) the owners are chosen before anyone knows which server is slow, so a
slow server may own as many prefixes as a fast one and serve them at half the speed. These
measurements let the scorer hold a slow server to its capacity share (see the scorer's docstring):

* :class:`EndpointSpeeds`: each endpoint's *decode time per token*, from the picker's own streamed
  responses (``Completion.decode_seconds`` over the tokens after the first), the median of its last
  ``window`` samples. An endpoint's relative speed is the fastest endpoint's median over its own
  (1.0 for the fastest); it is *slow* when that is at most ``slow_ratio``. Decode time per token
  depends on the server's engine and, far less, on its batch: on the benchmark's fleets equal servers
  measured 0.73-1.0 of the fastest over any 32-sample window, half-speed servers 0.42-0.51
  (docs/scheduler.md, "Slower servers").
* :class:`SlowEndpoints` holds a *slow* endpoint to its capacity share (``prefix-affinity-scorer``'s
  ``slowSpeedRatio``, ours). With each endpoint's decode time per token (the median of its last
  ``speedSamples``), its relative speed ``w(e)`` is the fastest endpoint's
  median over its own, and with ``share(e)`` its share of this picker's dispatches, exponentially
  decayed with half-life ``shareHalfLife``::

      slow(e)        ⇔  w(e) <= slowSpeedRatio
      capped(e)      ⇔  slow(e)  and  share(e) >= w(e) / Σ_candidates w        (its capacity share)

  A capped endpoint takes no new prefix (with ``load`` placement, a new prefix then scores 1 on every
  eligible endpoint that is not capped) and no spill, and sheds just enough of its prefixes: with
  ``share(k, e)`` the decayed share of the dispatches of prefix ``k`` (first block) to ``e`` and ``D(e)``
  the prefixes already kept off ``e`` (*diverted*), a prefix of a capped owner is diverted when::

      share(e) - Σ_{k in D(e)} share(k, e)  >=  w(e) / Σ_candidates w

  i.e. while the owner would stay at or above its capacity share even without the prefixes already
  diverted. A diverted prefix spills (the scorer's spill rule) and its requests go to the spill owner
  while the endpoint stays capped; below its share the endpoint's prefixes come back to it, so a
  diverted group ends split between the slow owner and a fast one, holding the slow one at its
  capacity share at the cost of one cold prefill per diverted group.
  Owners are placed in a run's first second, before any speed is known, so this corrects placement
  after the fact. On equal servers decode speed differs only with the batch (0.73-1.0 of the fastest
  in the benchmark's scenarios over any window), so nothing is slow at the default 0.65 and nothing
  changes; ``0`` turns it off. Measured: docs/bench.md, "Slower servers".
* :class:`DispatchShares`: each endpoint's share of this picker's recent dispatches, exponentially
  decayed with half-life ``half_life`` seconds (O(1) per dispatch and per query), and, for the
  dispatches the caller tags with a prefix key (the scorer tags every one), each (key, endpoint)'s share.

All are bounded: one deque of ``window`` floats and one float per endpoint, and at most ``max_keys``
(key, endpoint) weights (the oldest dropped first), at most ``MAX_DIVERTED`` diverted prefixes per
endpoint; ``forget`` drops endpoints that left the pool.
Not thread-safe (the lifecycle hooks' event-loop thread).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from statistics import median

from scheduler.types import Completion, Outcome

__all__ = ["DispatchShares", "EndpointSpeeds", "SlowEndpoints", "decode_seconds_per_token"]

_NONE: frozenset[str] = frozenset()
MAX_DIVERTED = 64  # prefixes kept off one slow endpoint (bounded; the oldest is dropped)


def decode_seconds_per_token(completion: Completion) -> float | None:
    """Seconds per output token after the first, from a successful streamed response; None when the
    completion cannot tell (not streamed, one token, an error)."""
    span = completion.decode_seconds
    if span <= 0.0 or completion.outcome is not Outcome.OK:
        return None
    tokens = completion.usage.completion_tokens or completion.output_chunks
    if tokens < 2:
        return None
    return span / (tokens - 1)


class EndpointSpeeds:
    """Per-endpoint decode time per token (median of the last ``window`` samples) and the slow set."""

    __slots__ = ("_medians", "_min_samples", "_samples", "_window", "slow", "slow_ratio", "speeds")

    def __init__(self, slow_ratio: float, window: int = 32) -> None:
        if not 0.0 <= slow_ratio < 1.0:
            raise ValueError(f"slow_ratio must be in [0, 1), got {slow_ratio}")
        if window < 4:
            raise ValueError(f"window must be >= 4, got {window}")
        self.slow_ratio = slow_ratio
        self._window = window
        self._min_samples = max(2, window // 4)
        self._samples: dict[str, deque[float]] = {}
        self._medians: dict[str, float] = {}
        self.speeds: dict[str, float] = {}
        """Relative speed of every endpoint with enough samples (the fastest's median over its own)."""
        self.slow: frozenset[str] = frozenset()
        """Endpoints whose relative speed is at most ``slow_ratio`` (empty until two have samples)."""

    def sample(self, address: str, seconds_per_token: float) -> None:
        """Record one response's decode time per token at ``address``."""
        if not seconds_per_token > 0.0 or math.isinf(seconds_per_token):
            return
        window = self._samples.get(address)
        if window is None:
            window = self._samples[address] = deque(maxlen=self._window)
        window.append(seconds_per_token)
        if len(window) >= self._min_samples:
            self._medians[address] = median(window)
            self._update()

    def forget(self, addresses: Iterable[str]) -> None:
        for address in addresses:
            self._samples.pop(address, None)
            self._medians.pop(address, None)
        self._update()

    def _update(self) -> None:
        medians = self._medians
        if len(medians) < 2:
            self.speeds = {a: 1.0 for a in medians}
            self.slow = frozenset()
            return
        fastest = min(medians.values())
        self.speeds = speeds = {a: fastest / m for a, m in medians.items()}
        ratio = self.slow_ratio
        self.slow = frozenset(a for a, s in speeds.items() if s <= ratio)

    def dump(self) -> dict[str, object]:
        return {
            "decode_ms_per_token": {a: round(m * 1000, 3) for a, m in sorted(self._medians.items())},
            "relative_speed": {a: round(s, 3) for a, s in sorted(self.speeds.items())},
            "slow": sorted(self.slow),
        }


class DispatchShares:
    """Each endpoint's exponentially decayed share of recent dispatches.

    A dispatch at time ``t`` adds ``2^((t - t0) / half_life)`` to its endpoint's weight (``t0`` a
    reference time), so every weight decays at the same rate and shares are plain ratios; the
    weights are rescaled when the exponent grows large. O(1) per dispatch and per share.
    """

    __slots__ = ("_half_life", "_keys", "_max_keys", "_t0", "_total", "_weights")

    _RESCALE_AFTER = 64.0  # half-lives: 2^64 is far from float overflow

    def __init__(self, half_life: float, max_keys: int = 4096) -> None:
        if not half_life > 0.0:
            raise ValueError(f"half_life must be > 0 seconds, got {half_life}")
        self._half_life = half_life
        self._max_keys = max(1, max_keys)
        self._t0: float | None = None
        self._weights: dict[str, float] = {}
        self._keys: dict[tuple[int, str], float] = {}
        self._total = 0.0

    def dispatch(self, address: str, now: float, key: int | None = None) -> None:
        """Count one dispatch to ``address`` at ``now``; with ``key``, for that prefix there too."""
        if self._t0 is None:
            self._t0 = now
        exponent = (now - self._t0) / self._half_life
        if exponent > self._RESCALE_AFTER:
            scale = 2.0**-exponent
            self._weights = {a: w * scale for a, w in self._weights.items() if w * scale > 1e-12}
            self._keys = {k: w * scale for k, w in self._keys.items() if w * scale > 1e-12}
            self._total = sum(self._weights.values())
            self._t0, exponent = now, 0.0
        add = 2.0**exponent
        self._weights[address] = self._weights.get(address, 0.0) + add
        self._total += add
        if key is not None:
            slot = (key, address)
            weight = self._keys.pop(slot, 0.0) + add  # re-inserted: the dict stays in last-use order
            if len(self._keys) >= self._max_keys:
                del self._keys[next(iter(self._keys))]
            self._keys[slot] = weight

    def share(self, address: str) -> float:
        """``address``'s share of the decayed dispatches (0.0 before any)."""
        total = self._total
        return self._weights.get(address, 0.0) / total if total > 0.0 else 0.0

    def key_share(self, key: int, address: str) -> float:
        """The share of the decayed dispatches that went to ``address`` tagged with ``key``."""
        total = self._total
        return self._keys.get((key, address), 0.0) / total if total > 0.0 else 0.0

    def shares(self) -> Mapping[str, float]:
        total = self._total
        return {a: w / total for a, w in self._weights.items()} if total > 0.0 else {}

    def forget(self, addresses: Iterable[str]) -> None:
        gone = set(addresses)
        for address in gone:
            self._total -= self._weights.pop(address, 0.0)
        if gone & {a for _, a in self._keys}:
            self._keys = {k: w for k, w in self._keys.items() if k[1] not in gone}
        if not self._weights:
            self._total = 0.0


class SlowEndpoints:
    """The slow-server rule of ``prefix-affinity-scorer``: learn speeds and dispatch shares from its
    lifecycle hooks, tell which slow endpoints are capped and which prefixes they divert."""

    __slots__ = ("_capacity", "_diverted", "diversions", "learns", "shares", "speeds")

    def __init__(self, slow_ratio: float, window: int, half_life: float) -> None:
        self.speeds = EndpointSpeeds(slow_ratio, window)
        self.shares = DispatchShares(half_life)
        self.learns = slow_ratio > 0.0  # 0 turns the rule off: nothing is learnt, nothing is slow
        self._diverted: dict[str, dict[int, None]] = {}  # slow endpoint -> first-block keys kept off it
        self._capacity: dict[str, float] = {}  # slow endpoint -> its capacity share (last computed)
        self.diversions = 0  # prefixes ever kept off a slow endpoint

    def dispatched(self, address: str, now: float, key: int | None) -> None:
        if self.learns:
            self.shares.dispatch(address, now, key)

    def completed(self, address: str, completion: Completion) -> None:
        """Sample ``address``'s decode time per token from a completed streamed response."""
        if self.learns and address:
            per_token = decode_seconds_per_token(completion)
            if per_token is not None:
                self.speeds.sample(address, per_token)

    def capped(self, addresses: Iterable[str]) -> frozenset[str]:
        """The slow endpoints whose share of recent dispatches is at least their capacity share among
        the candidates ``addresses``."""
        slow = self.speeds.slow
        if len(self._diverted) > len(slow):
            for address in [a for a in self._diverted if a not in slow]:
                del self._diverted[address]
        if not slow:
            return _NONE
        speeds = self.speeds.speeds
        total = sum(speeds.get(a, 1.0) for a in addresses)
        share = self.shares.share
        capacity = self._capacity
        capacity.clear()
        for address in slow:
            capacity[address] = speeds[address] / total
        return frozenset(a for a in slow if share(a) >= capacity[a])

    def diverts(self, owner: str, key: int) -> bool:
        """Whether the prefix of first block ``key`` is kept off ``owner``, a capped slow endpoint: the
        prefixes already kept off it are, and this one is too when the owner's share without theirs is
        still at least its capacity share (as last computed by :meth:`capped`)."""
        keys = self._diverted.get(owner)
        if keys is None:
            keys = self._diverted[owner] = {}
        elif key in keys:
            return True
        key_share = self.shares.key_share
        rest = self.shares.share(owner) - sum(key_share(k, owner) for k in keys)
        if rest < self._capacity.get(owner, 0.0):
            return False  # the prefixes already diverted make up the excess
        if len(keys) >= MAX_DIVERTED:
            del keys[next(iter(keys))]
        keys[key] = None
        self.diversions += 1
        return True

    def forget(self, addresses: Iterable[str]) -> None:
        gone = set(addresses)
        self.speeds.forget(gone)
        self.shares.forget(gone)
        for address in gone:
            self._diverted.pop(address, None)

    def dump(self) -> dict[str, object]:
        return {
            "speeds": self.speeds.dump(),
            "dispatch_share": {a: round(v, 4) for a, v in sorted(self.shares.shares().items())},
            "diverted": {a: len(keys) for a, keys in sorted(self._diverted.items()) if keys},
            "diversions": self.diversions,
        }
