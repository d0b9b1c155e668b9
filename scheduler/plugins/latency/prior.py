"""The cold-start TTFT prior of ``predicted-latency-producer`` (``coldStartPrior``, **ours**).

Until the learnt model has :data:`~scheduler.plugins.latency.model.MIN_SAMPLES` TTFT samples it makes
no prediction; upstream's consumers then fall back (the scorer to its composite, the tier filter to
keeping everything, the admitter to admitting). With the prior, predictions exist from the first
request: a prefill-throughput estimate from what the picker knows without learning,

``ttft_prior(e) = 1000 x prefill tokens(e) / rate(e)`` ms, where

* ``prefill tokens(e) = uncached(e) + inFlight(e) + unknown(e) x perUnknown(e)``: the request's own
  uncached prompt tokens on ``e`` (from the prefix match), the uncached tokens of this picker's
  requests on ``e`` that have not produced a first token yet, and the scraped waiting queue's requests
  this picker does not know (``unknown = max(0, waiting - own requests awaiting a first token)``: other
  pickers' or older requests), each counted as the mean of the picker's own awaiting requests there
  (as this request's uncached tokens when it has none);
* ``rate(e)`` (tokens/s) is measured from the first-token samples of at least :data:`RATE_MIN_TOKENS`
  prefill tokens (a cache hit's TTFT is mostly fixed overhead): ``sum(prefill tokens) / sum(TTFT)``
  over ``e``'s samples once it has :data:`RATE_SAMPLES` (one), else over the fleet's once the fleet
  has as many, else ``coldStartPrefillThroughput`` (default :data:`DEFAULT_PREFILL_THROUGHPUT`, llm-d's H100
  calibration of ``peakPrefillThroughput``). The ratio uses the same token count as the prediction,
  so it is the effective rate that maps that count to a TTFT (fixed overhead and batch slow-down
  included).

TPOT has no prior (0: valid, as before the first TPOT sample). Hand-over (:func:`learnt_share`): once
the learnt model predicts, the published TTFT is ``s x learnt + (1 - s) x prior`` with
``s = min(1, samples / HANDOVER_SAMPLES)``: half learnt at its first prediction (16 samples), learnt
alone from :data:`HANDOVER_SAMPLES` on.

The statistics are updated as each first-token sample is observed (on the request path, O(1): a rate
measured then is used by the next decision, not after the trainer's next refit). Memory: two floats
and a count per endpoint, at most :data:`~scheduler.plugins.latency.model.ENDPOINT_LIMIT` endpoints (the
least recently sampled dropped beyond).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.plugins.latency.model import Features

__all__ = [
    "DEFAULT_PREFILL_THROUGHPUT",
    "HANDOVER_SAMPLES",
    "RATE_MIN_TOKENS",
    "RATE_SAMPLES",
    "PrefillPrior",
    "learnt_share",
    "prefill_tokens",
]

DEFAULT_PREFILL_THROUGHPUT = 15928.0
"""Tokens/s before any sample: llm-d's H100 calibration (its affinity filter's ``peakPrefillThroughput``)."""
RATE_SAMPLES = 1
"""First-token samples an endpoint (or, before that, the fleet) needs before its measured rate
replaces the configured one (1 and 2 measured the same in the SLO scenario; 1 is used at once)."""
RATE_MIN_TOKENS = 1024
"""Prefill tokens a first-token sample needs to count toward a measured rate."""
HANDOVER_SAMPLES = 32
"""Learnt-model TTFT samples from which the prior is no longer blended in (see :func:`learnt_share`)."""


def learnt_share(samples: int) -> float:
    """The learnt model's share of a published TTFT when it has ``samples`` samples (it predicts)."""
    return min(1.0, samples / HANDOVER_SAMPLES)


def prefill_tokens(features: Features) -> float:
    """The prefill work ahead of and including the request on the endpoint (see the module doc)."""
    own, ahead, awaiting = features.uncached_tokens, features.prefill_tokens_in_flight, features.awaiting
    unknown = max(0, features.waiting - awaiting)
    return own + ahead + unknown * (ahead / awaiting if awaiting > 0 else own)


class PrefillPrior:
    """The prior and its measured-rate statistics. Updated and read on the request path (the
    producer's lifecycle hooks and decisions run on one thread); every operation is O(1)."""

    __slots__ = ("_endpoints", "_fleet", "default", "limit")

    def __init__(self, default: float, limit: int) -> None:
        self.default = default
        self.limit = limit
        self._fleet = [0.0, 0.0, 0]  # sum of prefill tokens, sum of TTFT seconds, samples
        self._endpoints: OrderedDict[str, list[Any]] = OrderedDict()

    def add(self, endpoint: str, features: Features, ttft_ms: float) -> None:
        """Fold one first-token sample in. Samples of fewer than :data:`RATE_MIN_TOKENS` prefill tokens
        are skipped: their TTFT is mostly the engine's fixed overhead, not prefill."""
        tokens, seconds = prefill_tokens(features), ttft_ms / 1000.0
        if tokens < RATE_MIN_TOKENS or seconds <= 0:
            return
        stats = self._endpoints.get(endpoint)
        if stats is None:
            stats = self._endpoints[endpoint] = [0.0, 0.0, 0]
            if len(self._endpoints) > self.limit:
                self._endpoints.popitem(last=False)
        else:
            self._endpoints.move_to_end(endpoint)
        for s in (stats, self._fleet):
            s[0] += tokens
            s[1] += seconds
            s[2] += 1

    def forget(self, endpoint: str) -> None:
        self._endpoints.pop(endpoint, None)

    def fleet_rate(self) -> float | None:
        fleet = self._fleet
        return fleet[0] / fleet[1] if fleet[2] >= RATE_SAMPLES else None

    def rate(self, endpoint: str) -> float:
        """The prefill rate (tokens/s) the prior uses for ``endpoint`` (see the module doc)."""
        stats = self._endpoints.get(endpoint)
        if stats is not None and stats[2] >= RATE_SAMPLES:
            return float(stats[0] / stats[1])
        fleet = self.fleet_rate()
        return fleet if fleet is not None else self.default

    def ttft(self, endpoint: str, features: Features) -> float:
        """The prior's TTFT (ms) of ``features`` on ``endpoint``."""
        return 1000.0 * prefill_tokens(features) / self.rate(endpoint)

    def state(self) -> dict[str, Any]:
        fleet = self.fleet_rate()
        return {
            "defaultTokensPerSecond": self.default,
            "fleetTokensPerSecond": None if fleet is None else round(fleet),
            "endpointRates": sum(1 for s in tuple(self._endpoints.values()) if s[2] >= RATE_SAMPLES),
        }
