"""A catalog family recorded under every exported naming scheme (:class:`Twin`).

``Twin(family, naming, registry)`` registers one fast collector per scheme the ``--metrics-naming``
setting exports (llm-d-router's ``llm_d_epp_*`` name and the deprecated ``inference_*`` twin);
``bind(label values)`` gives one :class:`Recorder` that updates every one of them (or nothing).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from typing import Any, Protocol, cast

from prometheus_client import CollectorRegistry

from epp.server.fastmetrics import FastCounter, FastGauge, FastHistogram, HistogramChild, pristine
from epp.server.metric_catalog import Family, Naming, Scheme

__all__ = ["NULL_RECORDER", "Recorder", "Twin"]


class Recorder(Protocol):
    def inc(self, amount: float = 1.0) -> None: ...
    def dec(self, amount: float = 1.0) -> None: ...
    def set(self, value: float) -> None: ...
    def observe(self, amount: float) -> None: ...


class _Null:
    """The recording object of a family the chosen scheme does not export."""

    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        pass

    def dec(self, amount: float = 1.0) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass


class _Both:
    """Records into the children of both schemes."""

    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def inc(self, amount: float = 1.0) -> None:
        self.a.inc(amount)
        self.b.inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self.a.dec(amount)
        self.b.dec(amount)

    def set(self, value: float) -> None:
        self.a.set(value)
        self.b.set(value)

    def observe(self, amount: float) -> None:
        self.a.observe(amount)
        self.b.observe(amount)


class _BothHistograms(_Both):
    """Two histogram children with the same buckets (a family's two names): one bucket search records
    into both, exactly what their two ``observe`` calls would (the plugin and request histograms are
    observed some 30 times per request)."""

    __slots__ = ("_bounds", "_counts_a", "_counts_b")

    def __init__(self, a: HistogramChild, b: HistogramChild) -> None:
        super().__init__(a, b)
        self._bounds = a.bounds
        self._counts_a, self._counts_b = a.counts, b.counts

    def observe(self, amount: float) -> None:
        if amount == amount:  # NaN: in no bucket, only in the sums (as HistogramChild.observe)
            i = bisect_left(self._bounds, amount)
            self._counts_a[i] += 1
            self._counts_b[i] += 1
        self.a.total += amount
        self.b.total += amount


NULL_RECORDER = _Null()
"""Records nothing: a family no exported scheme has."""


class Twin:
    """A catalog family's collectors for the exported schemes, registered in ``registry``."""

    def __init__(self, family: Family, naming: Naming, registry: CollectorRegistry | None) -> None:
        self.family = family
        self.parts: list[tuple[Any, tuple[str, ...]]] = []
        for scheme in (Scheme.LLM_D, Scheme.INFERENCE):
            name = family.name(scheme)
            if name is None or not naming.exports(scheme):
                continue
            labels = family.labels(scheme)
            doc = family.help if scheme is Scheme.LLM_D or family.llmd is None else (
                f"Deprecated twin of {family.llmd}: {family.help}"
            )  # fmt: skip
            collector: Any
            if family.kind == "counter":
                collector = FastCounter(name, doc, labels, registry=registry)
            elif family.kind == "gauge":
                collector = FastGauge(name, doc, labels, registry=registry)
            else:
                collector = FastHistogram(name, doc, labels, buckets=family.buckets, registry=registry)
            self.parts.append((collector, labels))
        # one label set of either name is one of the other: a child may serve both (see bind)
        self._same_labels = len(self.parts) == 2 and sorted(self.parts[0][1]) == sorted(self.parts[1][1])

    def bind(self, values: Mapping[str, str]) -> Recorder:
        """One recording object for ``values`` (a value for every label name of either scheme)."""
        children: list[Any] = [c.labels(*(values[n] for n in names)) for c, names in self.parts]
        if not children:
            return NULL_RECORDER
        if len(children) == 1 or children[0] is children[1]:
            return cast(Recorder, children[0])
        a, b = children
        same = type(a) is type(b) and (type(a) is not HistogramChild or a.bounds == b.bounds)
        if same and self._same_labels and pristine(a) and pristine(b):
            # Both names show the same samples: the second scheme's family records into the first's
            # child (one update per observation instead of two; the expositions are unchanged).
            collector, names = self.parts[1]
            collector.share([values[n] for n in names], a)
            return cast(Recorder, a)
        if type(a) is HistogramChild and type(b) is HistogramChild and a.bounds == b.bounds:
            return _BothHistograms(a, b)
        return _Both(a, b)
