"""The core metrics extractor: Prometheus samples + an engine mapping -> :class:`EndpointMetrics`.

Formulas (each over the series matched by the first spec of the field that is present in the body):

* ``waiting_queue_size`` / ``running_requests``: the sum of the series (one per model or rank);
* ``kv_cache_usage``: the maximum of the series, clamped into [0, 1];
* LoRA: the series with the highest value (vLLM sets it to the time of the last change); its labels
  ``max_lora`` (int), ``running_lora_adapters`` and ``waiting_lora_adapters`` (comma-separated);
* cache configuration: the first info series' block-size / block-count labels, or two gauges.

Queue, running and KV usage are required when the mapping enables them: a body without them, or
with a negative / NaN / infinite value, raises :class:`ExtractionError` (the endpoint becomes
unhealthy: it is not the engine we think, or it is lying). LoRA and cache configuration are optional.
"""

from __future__ import annotations

import math

from datalayer.engines import EngineMapping, MetricSpec
from datalayer.promtext import Samples
from datalayer.records import EndpointMetrics

__all__ = ["ExtractionError", "extract_metrics"]


class ExtractionError(ValueError):
    """A required metric is missing or has an impossible value."""


def _series(
    samples: Samples, specs: tuple[MetricSpec, ...]
) -> tuple[MetricSpec, list[tuple[dict[str, str], float]]] | None:
    for spec in specs:
        found = spec.select(samples)
        if found:
            return spec, found
    return None


def _checked(spec: MetricSpec, value: float) -> float:
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ExtractionError(f"{spec}: impossible value {value}")
    return value


def _required(samples: Samples, specs: tuple[MetricSpec, ...], combine: str) -> float:
    if not specs:
        return 0.0
    hit = _series(samples, specs)
    if hit is None:
        raise ExtractionError(f"metric {' or '.join(str(s) for s in specs)} missing")
    spec, series = hit
    values = [_checked(spec, v) for _, v in series]
    return max(values) if combine == "max" else sum(values)


def _count(value: float) -> int:
    return int(value + 0.5)


def _int_label(labels: dict[str, str], key: str, spec: MetricSpec) -> int | None:
    raw = labels.get(key)
    if raw is None or raw == "":
        return None
    try:
        number = int(float(raw))
    except ValueError:
        raise ExtractionError(f"{spec}: label {key}={raw!r} is not a number") from None
    if number < 0:
        raise ExtractionError(f"{spec}: label {key}={raw!r} is negative")
    return number


def _adapters(labels: dict[str, str], key: str) -> frozenset[str]:
    raw = labels.get(key, "")
    return frozenset(a.strip() for a in raw.split(",") if a.strip()) if raw else frozenset()


def _gauge_int(samples: Samples, specs: tuple[MetricSpec, ...]) -> int | None:
    hit = _series(samples, specs)
    if hit is None:
        return None
    spec, series = hit
    return _count(_checked(spec, series[0][1]))


def extract_metrics(samples: Samples, mapping: EngineMapping, now: float) -> EndpointMetrics:
    """Build the metrics record of one scrape at monotonic time ``now``; raise :class:`ExtractionError`."""
    waiting = _count(_required(samples, mapping.waiting, "sum"))
    running = _count(_required(samples, mapping.running, "sum"))
    kv = min(1.0, _required(samples, mapping.kv_usage, "max"))
    max_lora = 0
    running_adapters: frozenset[str] = frozenset()
    waiting_adapters: frozenset[str] = frozenset()
    lora = _series(samples, mapping.lora)
    if lora is not None:
        spec, series = lora
        labels = max(series, key=lambda s: s[1])[0]
        max_lora = _int_label(labels, "max_lora", spec) or 0
        running_adapters = _adapters(labels, "running_lora_adapters")
        waiting_adapters = _adapters(labels, "waiting_lora_adapters")
    block_size: int | None
    num_blocks: int | None
    info = _series(samples, mapping.cache_info)
    if info is not None:
        spec, series = info
        block_size = _int_label(series[0][0], mapping.block_size_label, spec)
        num_blocks = _int_label(series[0][0], mapping.num_blocks_label, spec)
    else:
        block_size = _gauge_int(samples, mapping.block_size)
        num_blocks = _gauge_int(samples, mapping.num_blocks)
    return EndpointMetrics(
        waiting_queue_size=waiting,
        running_requests=running,
        kv_cache_usage=kv,
        max_lora=max_lora,
        running_adapters=running_adapters,
        waiting_adapters=waiting_adapters,
        block_size=block_size or None,
        num_gpu_blocks=num_blocks or None,
        updated_at=now,
    )
