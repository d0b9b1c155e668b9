"""Lookup figures of the exact index, recorded with ``indexerConfig.kvBlockIndexConfig.enableMetrics``.

llm-d's instrumented index counts, per lookup (one per scheduled request with block keys):
``lookups``; ``hits``, the longest consecutive prefix any endpoint holds, in blocks, summed over
lookups (llm-d's ``lookup_hits`` and ``max_pod_hit_count`` both add it); and the lookup's latency in a
histogram with Prometheus' default buckets (``bounds``; ``buckets[i]`` counts lookups of at most
``bounds[i]`` seconds, the last one above every bound). Fixed size; single-threaded.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["DEFAULT_BUCKETS", "LookupStats"]

DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # prometheus.DefBuckets


class LookupStats:
    __slots__ = ("bounds", "buckets", "hits", "lookups", "seconds")

    def __init__(self, bounds: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.lookups = 0
        self.hits = 0
        self.seconds = 0.0

    def record(self, best_blocks: int, seconds: float) -> None:
        self.lookups += 1
        self.hits += best_blocks
        self.seconds += seconds
        self.buckets[bisect_left(self.bounds, seconds)] += 1
