"""Per-engine metric mappings: which Prometheus series hold the queue, running, KV usage, LoRA and
cache configuration of each model-server engine.

A metric *spec* is ``name`` or ``name{label="value",...}`` (quotes optional); a series matches when it
has that name and all those label values. A field holds a tuple of alternative specs; the first spec
present in a body is used, so vLLM accepts both ``vllm:kv_cache_usage_perc`` and the older
``vllm:gpu_cache_usage_perc``. An empty tuple disables the field.

Built-in engines: ``vllm`` (the default), ``sglang``, ``trtllm-serve``, ``triton-tensorrt-llm`` and
``triton`` (Triton Inference Server without the TensorRT-LLM backend: queue and running only). An
``engineConfigs`` entry (see :func:`parse_engine_configs`) replaces the built-in entry of the same name
entirely, as upstream does: a field it leaves out (or sets to an empty string) is disabled; an entry
with a new name defines a new engine. Cache configuration comes either from an info metric whose labels
hold the block size and block count (``cacheInfoSpec`` + ``cacheBlockSizeLabelName`` /
``cacheNumBlocksLabelName``, default ``block_size`` / ``num_gpu_blocks``) or from two gauges
(``cacheBlockSizeSpec`` / ``cacheNumBlocksSpec``). The name ``default`` is reserved (upstream registers
the default engine's mapping under it). ``customMetrics`` (llm-d-router) lists ``{attributeKey,
metricSpec}``: the value of the first series matching the spec becomes the endpoint attribute
``attributeKey`` (a float) on each scrape; a scrape without the series leaves the previous value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from datalayer.promtext import Samples

__all__ = [
    "BUILTIN_ENGINES",
    "DEFAULT_ENGINE",
    "RESERVED_ENGINE",
    "EngineConfigError",
    "EngineMapping",
    "MetricSpec",
    "apply_metric_overrides",
    "parse_engine_configs",
    "parse_spec",
]

DEFAULT_ENGINE = "vllm"
RESERVED_ENGINE = "default"


class EngineConfigError(ValueError):
    """Invalid engine mapping; ``location`` names the field (e.g. ``engineConfigs[1].kvUsageSpec``)."""

    def __init__(self, message: str, location: str = "") -> None:
        self.reason = message
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def select(self, samples: Samples) -> list[tuple[dict[str, str], float]]:
        """The series of ``samples`` this spec matches (possibly empty)."""
        series = samples.get(self.name, ())
        if not self.labels:
            return list(series)
        return [s for s in series if all(s[0].get(k) == v for k, v in self.labels)]

    def __str__(self) -> str:
        if not self.labels:
            return self.name
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in self.labels) + "}"


def _is_name(text: str, allow_colon: bool) -> bool:
    if not text or not (
        text[0].isascii() and (text[0].isalpha() or text[0] == "_" or (allow_colon and text[0] == ":"))
    ):
        return False
    return all(c.isascii() and (c.isalnum() or c == "_" or (allow_colon and c == ":")) for c in text)


def parse_spec(text: str, location: str = "") -> MetricSpec:
    """Parse ``name`` or ``name{k="v",k2=v2}``; raise :class:`EngineConfigError` naming ``location``."""
    text = text.strip()
    name, brace, rest = text.partition("{")
    name = name.strip()
    if not _is_name(name, allow_colon=True):
        raise EngineConfigError(f"invalid metric name {name!r} in spec {text!r}", location)
    if not brace:
        return MetricSpec(name)
    if not rest.endswith("}"):
        raise EngineConfigError(f"missing '}}' in spec {text!r}", location)
    labels: list[tuple[str, str]] = []
    for part in rest[:-1].split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if not eq or not _is_name(key, allow_colon=False) or '"' in value:
            raise EngineConfigError(f"expected label=value, got {part.strip()!r} in spec {text!r}", location)
        labels.append((key, value))
    return MetricSpec(name, tuple(labels))


Specs = tuple[MetricSpec, ...]


@dataclass(frozen=True, slots=True)
class EngineMapping:
    """Where one engine publishes each value the picker reads."""

    name: str
    waiting: Specs = ()
    running: Specs = ()
    kv_usage: Specs = ()
    lora: Specs = ()
    cache_info: Specs = ()
    block_size_label: str = "block_size"
    num_blocks_label: str = "num_gpu_blocks"
    block_size: Specs = ()
    num_blocks: Specs = ()
    custom: tuple[tuple[str, MetricSpec], ...] = ()  # (attribute key, spec): llm-d-router customMetrics

    def wanted_names(self) -> frozenset[str]:
        """Every sample name this mapping reads (the parser skips all others)."""
        groups = (self.waiting, self.running, self.kv_usage, self.lora, self.cache_info)
        specs = [s for g in (*groups, self.block_size, self.num_blocks) for s in g]
        return frozenset(s.name for s in specs) | {spec.name for _, spec in self.custom}


def _specs(*texts: str) -> Specs:
    return tuple(parse_spec(t) for t in texts)


_TRITON_REQ = "nv_trt_llm_request_metrics"
_TRITON_KV = "nv_trt_llm_kv_cache_block_metrics"

BUILTIN_ENGINES: Mapping[str, EngineMapping] = MappingProxyType(
    {
        "vllm": EngineMapping(
            name="vllm",
            waiting=_specs("vllm:num_requests_waiting"),
            running=_specs("vllm:num_requests_running"),
            kv_usage=_specs("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            lora=_specs("vllm:lora_requests_info"),
            cache_info=_specs("vllm:cache_config_info"),
        ),
        "sglang": EngineMapping(
            name="sglang",
            waiting=_specs("sglang:num_queue_reqs"),
            running=_specs("sglang:num_running_reqs"),
            kv_usage=_specs("sglang:token_usage"),
            cache_info=_specs("sglang:cache_config_info"),
            block_size_label="page_size",
            num_blocks_label="num_pages",
        ),
        "trtllm-serve": EngineMapping(
            name="trtllm-serve",
            waiting=_specs("trtllm_num_requests_waiting"),
            running=_specs("trtllm_num_requests_running"),
            kv_usage=_specs("trtllm_kv_cache_utilization"),
            block_size=_specs("trtllm_kv_cache_tokens_per_block"),
            num_blocks=_specs("trtllm_kv_cache_max_blocks"),
        ),
        "triton-tensorrt-llm": EngineMapping(
            name="triton-tensorrt-llm",
            waiting=_specs(f'{_TRITON_REQ}{{request_type="waiting"}}'),
            running=_specs(f'{_TRITON_REQ}{{request_type="scheduled"}}'),
            kv_usage=_specs(f'{_TRITON_KV}{{kv_cache_block_type="fraction"}}'),
            block_size=_specs(f'{_TRITON_KV}{{kv_cache_block_type="tokens_per"}}'),
            num_blocks=_specs(f'{_TRITON_KV}{{kv_cache_block_type="max"}}'),
        ),
        "triton": EngineMapping(
            name="triton",
            waiting=_specs("nv_inference_pending_request_count"),
            running=_specs("nv_inference_exec_count"),
        ),
    }
)

# engineConfigs key -> EngineMapping field; spec fields hold specs, label fields plain label names.
_SPEC_KEYS = {
    "queuedRequestsSpec": "waiting",
    "runningRequestsSpec": "running",
    "kvUsageSpec": "kv_usage",
    "loraSpec": "lora",
    "cacheInfoSpec": "cache_info",
    "cacheBlockSizeSpec": "block_size",
    "cacheNumBlocksSpec": "num_blocks",
}
_LABEL_KEYS = {"cacheBlockSizeLabelName": "block_size_label", "cacheNumBlocksLabelName": "num_blocks_label"}
_KNOWN_KEYS = {"name", "customMetrics", *_SPEC_KEYS, *_LABEL_KEYS}


def _custom_metrics(value: Any, location: str) -> tuple[tuple[str, MetricSpec], ...]:
    """``customMetrics: [{attributeKey, metricSpec}]``: keys non-empty and unique, specs valid."""
    if not isinstance(value, list):
        raise EngineConfigError(f"expected a list of {{attributeKey, metricSpec}}, got {value!r}", location)
    out: list[tuple[str, MetricSpec]] = []
    for i, entry in enumerate(value):
        where = f"{location}[{i}]"
        if not isinstance(entry, Mapping):
            raise EngineConfigError(f"expected a mapping, got {entry!r}", where)
        unknown = sorted(set(entry) - {"attributeKey", "metricSpec"})
        if unknown:
            raise EngineConfigError(
                "unknown key (expected attributeKey, metricSpec)", f"{where}.{unknown[0]}"
            )
        key, spec = entry.get("attributeKey"), entry.get("metricSpec")
        if not isinstance(key, str) or not key:
            raise EngineConfigError("custom metric attributeKey cannot be empty", f"{where}.attributeKey")
        if any(key == k for k, _ in out):
            raise EngineConfigError(
                f"custom metric attributeKey {key!r} is duplicated", f"{where}.attributeKey"
            )
        if not isinstance(spec, str) or not spec.strip():
            raise EngineConfigError(f"custom metric {key!r} spec cannot be empty", f"{where}.metricSpec")
        out.append((key, parse_spec(spec, f"{where}.metricSpec")))
    return tuple(out)


def _spec_value(value: Any, location: str) -> Specs:
    items: Iterable[Any]
    if isinstance(value, str):
        items = [value] if value.strip() else []
    elif isinstance(value, list):
        items = value
    else:
        raise EngineConfigError(f"expected a metric spec string or a list of them, got {value!r}", location)
    out: list[MetricSpec] = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise EngineConfigError(
                f"expected a non-empty metric spec string, got {item!r}", f"{location}[{i}]"
            )
        out.append(parse_spec(item, f"{location}[{i}]" if isinstance(value, list) else location))
    return tuple(out)


def _parse_entry(entry: Any, location: str) -> EngineMapping:
    if not isinstance(entry, Mapping):
        raise EngineConfigError(f"expected a mapping, got {entry!r}", location)
    unknown = sorted(set(entry) - _KNOWN_KEYS)
    if unknown:
        raise EngineConfigError(
            f"unknown key (expected one of {sorted(_KNOWN_KEYS)})", f"{location}.{unknown[0]}"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise EngineConfigError("engine config name cannot be empty", f"{location}.name")
    if name == RESERVED_ENGINE:
        raise EngineConfigError(
            f"engine config name cannot be {RESERVED_ENGINE!r} (reserved)", f"{location}.name"
        )
    base = EngineMapping(name=name)  # full replacement of a built-in of that name
    changes: dict[str, Any] = {}
    for key, attr in _SPEC_KEYS.items():
        if key in entry:
            changes[attr] = _spec_value(entry[key], f"{location}.{key}")
    if entry.get("customMetrics") is not None:
        changes["custom"] = _custom_metrics(entry["customMetrics"], f"{location}.customMetrics")
    for key, attr in _LABEL_KEYS.items():
        if key in entry:
            value = entry[key]
            if value == "":
                continue  # upstream: empty means the default label name
            if not isinstance(value, str) or not _is_name(value, allow_colon=False):
                raise EngineConfigError(f"expected a label name, got {value!r}", f"{location}.{key}")
            changes[attr] = value
    return replace(base, **changes)


def parse_engine_configs(entries: Any, location: str = "engineConfigs") -> Mapping[str, EngineMapping]:
    """The built-in engines with ``entries`` (an ``engineConfigs`` list) replacing those of their names."""
    if entries is None:
        return BUILTIN_ENGINES
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise EngineConfigError(f"expected a list of engine entries, got {entries!r}", location)
    engines = dict(BUILTIN_ENGINES)
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        mapping = _parse_entry(entry, f"{location}[{i}]")
        if mapping.name in seen:
            raise EngineConfigError(f"duplicate engine {mapping.name!r}", f"{location}[{i}].name")
        seen.add(mapping.name)
        engines[mapping.name] = mapping
    return MappingProxyType(engines)


# GIE's per-metric flags (``--total-queued-requests-metric`` ...) as (key, spec) pairs.
_OVERRIDE_KEYS = {
    "waiting": "waiting",
    "running": "running",
    "kv_usage": "kv_usage",
    "lora": "lora",
    "cache_config": "cache_info",
}


def apply_metric_overrides(
    engines: Mapping[str, EngineMapping], overrides: Sequence[tuple[str, str]], engine: str = DEFAULT_ENGINE
) -> Mapping[str, EngineMapping]:
    """Apply flag overrides ``(key, spec)`` to ``engine``.

    Keys: waiting, running, kv_usage, lora, cache_config (GIE's per-metric flags).
    """
    if not overrides:
        return engines
    mapping = engines.get(engine, EngineMapping(name=engine))
    changes: dict[str, Any] = {}
    for key, text in overrides:
        attr = _OVERRIDE_KEYS.get(key)
        if attr is None:
            raise EngineConfigError(f"unknown metric key {key!r} (expected one of {sorted(_OVERRIDE_KEYS)})")
        changes[attr] = _spec_value(text, key)
    out = dict(engines)
    out[engine] = replace(mapping, **changes)
    return MappingProxyType(out)
