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
``models-data-source`` (``/v1/models`` every 5 s; it decodes the JSON, as upstream's ``parseModels``)
with the ``models-data-extractor`` (:class:`ModelsExtractor`) adding attributes ``models`` (frozenset
of base model ids) and ``adapters`` (read-only mapping adapter id -> parent model id). A
models-data-source listed without extractors runs the models-data-extractor (pyepp's default; upstream
would fetch and store nothing).

Each source carries its :class:`~datalayer.connection.SourceConnection` (scheme, port, TLS; unset
fields take the layer's flags) and an optional own interval, rounded as upstream does to the nearest
multiple of ``--refresh-metrics-interval`` (at least one; zero means every base tick), see
:func:`tick_interval`.

The core extractor picks an endpoint's engine from its labels: ``engine_label_key`` (default
``llm-d.ai/engine-type``), else GIE's ``inference.networking.k8s.io/engine-type``, else
``default_engine`` (``vllm``); an engine without a mapping uses the default engine's mapping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import orjson

from datalayer.connection import SourceConnection
from datalayer.engines import BUILTIN_ENGINES, DEFAULT_ENGINE, EngineMapping
from datalayer.extract import ExtractionError, extract_metrics
from datalayer.promtext import LazySamples, Samples
from datalayer.records import ENGINE_LABEL, LLMD_ENGINE_LABEL, EndpointMetrics, EndpointSpec

__all__ = [
    "ENGINE_LABEL_KEY",
    "CoreMetricsExtractor",
    "DataSource",
    "MetricsDataSource",
    "MetricsExtractor",
    "ModelsDataSource",
    "ModelsExtractor",
    "SourceUpdate",
    "tick_interval",
]

ENGINE_LABEL_KEY = LLMD_ENGINE_LABEL
"""llm-d-router's engine label (the default ``engineLabelKey``); GIE's label is the fallback."""


def tick_interval(interval: float | None, base: float) -> float:
    """``interval`` rounded to the nearest multiple of ``base`` (at least one); None or 0: ``base``."""
    if interval is None or interval <= 0:
        return base
    return max(1, int(interval / base + 0.5)) * base


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
    connection: SourceConnection

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


class CoreMetricsExtractor:
    """Queue, running, KV usage, LoRA and cache configuration, per engine mapping.

    ``default_engine`` must name one of ``engines`` (ValueError otherwise)."""

    plugin_type = "core-metrics-extractor"

    def __init__(
        self,
        name: str = "core-metrics-extractor",
        engines: Mapping[str, EngineMapping] | None = None,
        *,
        engine_label_key: str = ENGINE_LABEL_KEY,
        default_engine: str = DEFAULT_ENGINE,
    ):
        self.name = name
        self.engines = engines if engines is not None else BUILTIN_ENGINES
        self.engine_label_key = engine_label_key or ENGINE_LABEL_KEY
        if default_engine not in self.engines:
            raise ValueError(f"defaultEngine {default_engine!r} not found in engineConfigs")
        self.default_engine = default_engine

    def mapping_for(self, endpoint: EndpointSpec) -> EngineMapping:
        """The mapping of the endpoint's engine label (or of the default engine)."""
        labels = endpoint.labels
        engine = labels.get(self.engine_label_key) or labels.get(ENGINE_LABEL) or self.default_engine
        mapping = self.engines.get(engine)
        return mapping if mapping is not None else self.engines[self.default_engine]

    def extract(self, samples: Samples, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        mapping = self.mapping_for(endpoint)
        metrics = extract_metrics(samples, mapping, now)
        custom: dict[str, Any] = {}
        for key, spec in mapping.custom:  # customMetrics: the first matching series' value
            series = spec.select(samples)
            if series:
                custom[key] = series[0][1]
        return SourceUpdate(metrics=metrics, attributes=custom or None)


class MetricsDataSource:
    """``GET /metrics``: parse the Prometheus text once, run every extractor on the samples."""

    plugin_type = "metrics-data-source"
    primary = True

    def __init__(
        self,
        name: str = "metrics-data-source",
        extractors: Sequence[MetricsExtractor] | None = None,
        path: str = "/metrics",
        *,
        interval: float | None = None,
        connection: SourceConnection | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self.extractors: tuple[MetricsExtractor, ...] = (
            tuple(extractors) if extractors is not None else (CoreMetricsExtractor(),)
        )
        self._interval = interval
        self.connection = connection or SourceConnection()

    def interval(self, refresh_interval: float) -> float:
        """Every base tick, or the configured interval rounded to base ticks."""
        return tick_interval(self._interval, refresh_interval)

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


class ModelsExtractor:
    """``models-data-extractor``: the base models and LoRA adapters (entries with a ``parent``) of a
    decoded ``/v1/models`` response (OpenAI's list format: ``{"data": [{"id": ..., "parent": ...}]}``).
    Raises ValueError for a document without a ``data`` list or an entry without a string ``id``."""

    plugin_type = "models-data-extractor"

    def __init__(self, name: str = "models-data-extractor") -> None:
        self.name = name

    def extract(self, doc: Any, endpoint: EndpointSpec, now: float) -> SourceUpdate:
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


class ModelsDataSource:
    """``GET /v1/models``: decode the JSON once, run every extractor on it (default: one
    :class:`ModelsExtractor`)."""

    plugin_type = "models-data-source"
    primary = False

    def __init__(
        self,
        name: str = "models-data-source",
        path: str = "/v1/models",
        interval: float = 5.0,
        *,
        connection: SourceConnection | None = None,
        extractors: Sequence[ModelsExtractor] | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self._interval = interval
        self.connection = connection or SourceConnection()
        self.extractors: tuple[ModelsExtractor, ...] = (
            tuple(extractors) if extractors else (ModelsExtractor(),)
        )

    def interval(self, refresh_interval: float) -> float:
        """The configured interval (default 5 s) rounded to base ticks."""
        return tick_interval(self._interval, refresh_interval)

    def extract(self, body: bytes, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"/v1/models: invalid JSON ({exc})") from None
        attributes: dict[str, Any] = {}
        for extractor in self.extractors:
            update = extractor.extract(doc, endpoint, now)
            attributes.update(update.attributes or {})
        return SourceUpdate(attributes=attributes)
