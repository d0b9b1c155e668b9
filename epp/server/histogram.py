"""A Prometheus histogram with a cheap ``observe`` (per-request metrics on the event loop's hot path).

:class:`FastHistogram` exposes exactly what ``prometheus_client.Histogram`` exposes (``<name>_bucket``
with cumulative ``le`` buckets ending in ``+Inf``, ``<name>_count``, ``<name>_sum``, and ``<name>_created``
unless created samples are disabled) and offers the same recording API the picker uses:
``labels(*values).observe(v)`` or, without label names, ``observe(v)``. An observation of ``v`` counts
into the first bucket whose upper bound is ``>= v`` (``bisect_left``; the ``le`` semantics of
``prometheus_client``); NaN counts in no bucket (nor in ``_count``) and makes ``_sum`` NaN, as there.

Why: ``prometheus_client`` takes a lock twice per observation and walks the buckets in Python (about
1.5 µs); here an observation is one ``bisect`` and two additions (about 0.2 µs), and the cumulative
buckets are built at scrape time. Not thread-safe for writers: observe from one thread (the event
loop); a scrape from another thread may see a count and a sum one observation apart.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as _prometheus_metrics
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

__all__ = ["FastHistogram", "HistogramChild"]


class HistogramChild:
    """The counts of one label set: ``counts[i]`` observations in bucket ``i`` (not cumulative)."""

    __slots__ = ("_bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        if amount == amount:  # NaN counts in no bucket (as in prometheus_client), only in the sum
            self.counts[bisect_left(self._bounds, amount)] += 1
        self.total += amount


class FastHistogram:
    """A histogram collector registered in ``registry``; label values are strings (as given)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError(f"histogram {name}: buckets not in sorted order")
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        if len(bounds) < 2:
            raise ValueError(f"histogram {name}: at least one finite bucket is needed")
        if "le" in labelnames:
            raise ValueError(f"histogram {name}: 'le' is a reserved label name")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = tuple(bounds)
        self._les = tuple(floatToGoString(b) for b in bounds)  # type: ignore[no-untyped-call]
        self._children: dict[tuple[str, ...], HistogramChild] = {}
        if not self.labelnames:
            self._children[()] = HistogramChild(self._bounds)
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> HistogramChild:
        """The child of one label set (created on first use)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"histogram {self.name}: expected {len(self.labelnames)} label values")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = HistogramChild(self._bounds)
        return child

    def observe(self, amount: float) -> None:
        """Observe on the histogram without labels."""
        if self.labelnames:
            raise ValueError(f"histogram {self.name} has labels: use labels(...).observe()")
        self._children[()].observe(amount)

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = getattr(_prometheus_metrics, "_use_created", False)
        for key, child in list(self._children.items()):
            acc = 0.0
            buckets: list[tuple[str, float]] = []
            for le, count in zip(self._les, child.counts, strict=True):
                acc += count
                buckets.append((le, acc))
            family.add_metric(list(key), buckets, child.total)
            if created:
                labels = dict(zip(self.labelnames, key, strict=True))
                family.samples.append(Sample(self.name + "_created", labels, child.created, None, None))
        return [family]
