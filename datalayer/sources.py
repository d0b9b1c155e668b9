"""The data-source plugin contract and the two built-in sources.

A *data source* fetches one HTTP path of every endpoint on its own interval and turns the body into a
:class:`SourceUpdate` (new metrics and/or named attributes). A source may delegate the turning to
*extractors*; the metrics source parses the Prometheus body once and hands the samples to each of its
extractors. Contracts:

* ``extract`` is pure and synchronous (runs on the event loop: keep it cheap); it raises ``ValueError``
  (or a subclass) for a body it cannot use. The poller turns that into the endpoint's ``last_error``.
* A *primary* source decides health: its failures make the endpoint unhealthy, its successes healthy.
  A secondary source's failure keeps the previous attributes and is only logged (on transitions).
* Attributes from different sources are merged by key; a source owns the keys it returns.

Built-ins: ``metrics-data-source`` (``/metrics``, primary, interval = ``--refresh-metrics-interval``)
with the ``core-metrics-extractor`` (engine mappings -> :class:`EndpointMetrics`), and
``models-data-source`` (``/v1/models`` every 5 s) adding attributes ``models`` (frozenset of base model
ids) and ``adapters`` (read-only mapping adapter id -> parent model id).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import orjson

from datalayer.engines import BUILTIN_ENGINES, EngineMapping
from datalayer.extract import ExtractionError, extract_metrics
from datalayer.promtext import LazySamples, Samples
from datalayer.records import EndpointMetrics, EndpointSpec

__all__ = [
    "CoreMetricsExtractor",
    "DataSource",
    "MetricsDataSource",
    "MetricsExtractor",
    "ModelsDataSource",
    "SourceUpdate",
]


@dataclass(frozen=True, slots=True)
class SourceUpdate:
    """What one fetch contributed: new metrics (primary sources) and/or attributes to merge."""

    metrics: EndpointMetrics | None = None
    attributes: Mapping[str, Any] | None = None


@runtime_checkable
class DataSource(Protocol):
    plugin_type: str
    name: str
    path: str
    primary: bool

    def interval(self, refresh_interval: float) -> float:
        """Seconds between fetches, given the layer's ``--refresh-metrics-interval``."""
        ...

    def extract(self, body: bytes, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        """Turn a 2xx body into an update; raise ``ValueError`` for an unusable body. Pure."""
        ...


@runtime_checkable
class MetricsExtractor(Protocol):
    plugin_type: str
    name: str

    def extract(self, samples: Samples, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        """Turn parsed samples into an update; raise ``ValueError`` when they are unusable. Pure."""
        ...


class UnknownEngineError(ExtractionError):
    pass


class CoreMetricsExtractor:
    """Queue, running, KV usage, LoRA and cache configuration, per engine mapping."""

    plugin_type = "core-metrics-extractor"

    def __init__(
        self, name: str = "core-metrics-extractor", engines: Mapping[str, EngineMapping] | None = None
    ):
        self.name = name
        self.engines = engines if engines is not None else BUILTIN_ENGINES

    def _mapping(self, engine: str) -> EngineMapping:
        mapping = self.engines.get(engine)
        if mapping is None:
            raise UnknownEngineError(
                f"unknown engine type {engine!r} (known: {', '.join(sorted(self.engines))})"
            )
        return mapping

    def extract(self, samples: Samples, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        return SourceUpdate(metrics=extract_metrics(samples, self._mapping(endpoint.engine), now))


class MetricsDataSource:
    """``GET /metrics``: parse the Prometheus text once, run every extractor on the samples."""

    plugin_type = "metrics-data-source"
    primary = True

    def __init__(
        self,
        name: str = "metrics-data-source",
        extractors: Sequence[MetricsExtractor] | None = None,
        path: str = "/metrics",
    ) -> None:
        self.name = name
        self.path = path
        self.extractors: tuple[MetricsExtractor, ...] = (
            tuple(extractors) if extractors is not None else (CoreMetricsExtractor(),)
        )

    def interval(self, refresh_interval: float) -> float:
        return refresh_interval

    def extract(self, body: bytes, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"body is not UTF-8 text (byte {exc.start})") from None
        samples = LazySamples(text)
        metrics: EndpointMetrics | None = None
        attributes: dict[str, Any] = {}
        for extractor in self.extractors:
            update = extractor.extract(samples, endpoint, now)
            if update.metrics is not None:
                metrics = update.metrics
            if update.attributes:
                attributes.update(update.attributes)
        if metrics is None:
            raise ExtractionError("no extractor produced metrics")
        return SourceUpdate(metrics=metrics, attributes=attributes or None)


class ModelsDataSource:
    """``GET /v1/models``: the base models and LoRA adapters (entries with a ``parent``) served."""

    plugin_type = "models-data-source"
    primary = False

    def __init__(
        self, name: str = "models-data-source", path: str = "/v1/models", interval: float = 5.0
    ) -> None:
        self.name = name
        self.path = path
        self._interval = interval

    def interval(self, refresh_interval: float) -> float:
        return self._interval

    def extract(self, body: bytes, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"/v1/models: invalid JSON ({exc})") from None
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list):
            raise ValueError("/v1/models: expected an object with a 'data' list")
        models: set[str] = set()
        adapters: dict[str, str] = {}
        for i, entry in enumerate(data):
            model_id = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(model_id, str) or not model_id:
                raise ValueError(f"/v1/models: data[{i}] has no string 'id'")
            parent = entry.get("parent")
            if isinstance(parent, str) and parent:
                adapters[model_id] = parent
            elif parent is None:
                models.add(model_id)
            else:
                raise ValueError(f"/v1/models: data[{i}].parent must be a string or null")
        return SourceUpdate(
            attributes={"models": frozenset(models), "adapters": MappingProxyType(adapters)},
        )
