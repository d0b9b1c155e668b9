"""Prometheus collectors with cheap recording, for the per-request metrics on the event loop's hot path.

:class:`FastHistogram`, :class:`FastCounter` and :class:`FastGauge` expose exactly what
``prometheus_client``'s ``Histogram``, ``Counter`` and ``Gauge`` expose (same sample names, labels,
``_created`` samples when those are enabled; checked against the library in
``tests/epp/server/test_server_fastmetrics.py``) and offer the recording API the picker uses:
``labels(*values)`` then ``observe(v)`` / ``inc(v)`` / ``dec(v)`` / ``set(v)``, or the same methods on
a collector without label names.

Histograms: an observation of ``v`` counts into the first bucket whose upper bound is ``>= v``
(``bisect_left``; the ``le`` semantics of ``prometheus_client``); NaN counts in no bucket (nor in
``_count``) and makes ``_sum`` NaN, as there. Counters refuse negative increments, as there.

Why: ``prometheus_client`` takes a lock on every update (twice per histogram observation, and walks the
buckets in Python: about 1.5 µs); here an observation is one ``bisect`` and two additions (about
0.2 µs), a counter or gauge update one addition, and the cumulative buckets are built at scrape time.
Not thread-safe for writers: record from one thread (the event loop); a scrape from another thread may
see a histogram's count and sum one observation apart.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client import metrics as _prometheus_metrics
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

__all__ = [
    "CounterChild",
    "FastCounter",
    "FastGauge",
    "FastHistogram",
    "GaugeChild",
    "HistogramChild",
    "pristine",
]


_C = TypeVar("_C")


def _use_created() -> bool:
    return bool(getattr(_prometheus_metrics, "_use_created", False))


class CounterChild:
    """The value of one label set of a counter."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class GaugeChild:
    """The value of one label set of a gauge."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


def pristine(child: object) -> bool:
    """Nothing recorded in ``child`` yet."""
    if isinstance(child, HistogramChild):
        return child.total == 0.0 and not any(child.counts)
    return getattr(child, "value", None) == 0.0


class _Family(Generic[_C]):
    """Name, documentation, label names, children by label values, registration."""

    _suffix = ""  # dropped from the name (the exposition adds it back)
    _new_child: Callable[[], _C]  # makes the recording object of one label set
    _metric: Callable[..., Metric]  # the prometheus_client family type (name, documentation, labels=)

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.name = name.removesuffix(self._suffix) if self._suffix else name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _C] = {}
        if not self.labelnames:
            self._children[()] = self._new_child()
        if registry is not None:
            registry.register(self)  # type: ignore[arg-type]

    def labels(self, *values: str) -> _C:
        """The child of one label set (created on first use)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected {len(self.labelnames)} label values")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child()
        return child

    def share(self, values: Sequence[str], child: _C) -> None:
        """Record the label set ``values`` in ``child``, another family's child of the same kind (a
        twin's other name: both series then show the same samples). Only for a label set not yet
        recorded here."""
        key = tuple(str(v) for v in values)
        mine = self._children.get(key)
        if mine is not None and mine is not child and not pristine(mine):
            raise ValueError(f"{self.name}: label set {key} already recorded")
        self._children[key] = child

    def _unlabelled(self) -> _C:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels: use labels(...) first")
        return self._children[()]

    def describe(self) -> Iterable[Metric]:
        return [self._metric(self.name, self.documentation, labels=self.labelnames)]


class FastCounter(_Family[CounterChild]):
    """A counter; ``name`` without ``_total`` (added in the exposition, as prometheus_client does)."""

    _suffix = "_total"
    _new_child = CounterChild
    _metric = CounterMetricFamily

    def inc(self, amount: float = 1.0) -> None:
        self._unlabelled().inc(amount)

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _use_created()
        for key, child in list(self._children.items()):
            family.add_metric(list(key), child.value, created=child.created if created else None)
        return [family]


class FastGauge(_Family[GaugeChild]):
    """A gauge (``inc``/``dec``/``set``)."""

    _new_child = GaugeChild
    _metric = GaugeMetricFamily

    def inc(self, amount: float = 1.0) -> None:
        self._unlabelled().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self._unlabelled().dec(amount)

    def set(self, value: float) -> None:
        self._unlabelled().set(value)

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in list(self._children.items()):
            family.add_metric(list(key), child.value)
        return [family]


class HistogramChild:
    """The counts of one label set: ``counts[i]`` observations in bucket ``i`` (not cumulative)."""

    __slots__ = ("_bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)  # never replaced: recorders may hold it
        self.total = 0.0
        self.created = time.time()

    @property
    def bounds(self) -> tuple[float, ...]:
        """The buckets' upper bounds (the last is +Inf)."""
        return self._bounds

    def observe(self, amount: float) -> None:
        if amount == amount:  # NaN counts in no bucket (as in prometheus_client), only in the sum
            self.counts[bisect_left(self._bounds, amount)] += 1
        self.total += amount


class FastHistogram(_Family[HistogramChild]):
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
        self._bounds = tuple(bounds)
        self._les = tuple(floatToGoString(b) for b in bounds)  # type: ignore[no-untyped-call]
        self._new_child = partial(HistogramChild, self._bounds)
        super().__init__(name, documentation, labelnames, registry=registry)

    _metric = HistogramMetricFamily

    def observe(self, amount: float) -> None:
        """Observe on the histogram without labels."""
        self._unlabelled().observe(amount)

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        created = _use_created()
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
