"""A catalog family recorded under every exported naming scheme (:class:`Twin`).

``Twin(family, naming, registry)`` registers one fast collector per scheme the ``--metrics-naming``
setting exports (llm-d-router's ``llm_d_epp_*`` name and the deprecated ``inference_*`` twin);
``bind(label values)`` gives one :class:`Recorder` that updates every one of them (or nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from epp.server.fastmetrics import FastCounter, FastGauge, FastHistogram
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

    def bind(self, values: Mapping[str, str]) -> Recorder:
        """One recording object for ``values`` (a value for every label name of either scheme)."""
        children = [c.labels(*(values[n] for n in names)) for c, names in self.parts]
        if not children:
            return NULL_RECORDER
        return children[0] if len(children) == 1 else _Both(children[0], children[1])
