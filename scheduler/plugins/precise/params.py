"""Parameters of ``precise-prefix-cache-producer`` / ``precise-prefix-cache-scorer`` (llm-d's names).

``tokenProcessorConfig``: ``blockSizeTokens`` (the servers' ``--block-size``, default 16; ``blockSize``
is its deprecated name), ``hashSeed`` (the servers' ``PYTHONHASHSEED``; empty: vLLM's default seed),
``hashAlgorithm`` (the servers' ``--prefix-caching-hash-algo``: ``sha256`` (vLLM's default),
``sha256_cbor``, ``xxhash``, ``xxhash_cbor``). llm-d's own key algorithms ``cbor-fnv`` / ``xxh64`` are
rejected: pyepp looks up the servers' own hashes, so the algorithm must be the servers'.

``indexerConfig``: ``kvBlockIndexConfig`` (``inMemoryConfig.size``: the most keys per server, default
1,048,576 (llm-d: keys in all); ``enableMetrics`` (record llm-d's ``kv_cache_index_*`` figures:
admissions, evictions, lookups, hits, lookup latency, exported on ``/metrics``, default false);
``metricsLoggingInterval`` (also log them this often; Go duration string or nanoseconds; 0, the
default, logs nothing, as llm-d)); ``kvCacheBackendConfigs`` (``[{name, weight}]``, tier weights,
default gpu 1.0, cpu 0.8); ``maxPrefixBlocksToMatch`` (blocks hashed per request, default 4096; older
llm-d releases put it in ``kvBlockIndexConfig`` and ``tokenProcessorConfig`` in ``indexerConfig``: both
places are read). ``inMemoryConfig.podCacheSize`` (llm-d's per-block cap on remembered servers) has
no counterpart in pyepp's per-server key sets and is rejected; so are ``redisConfig`` and
``costAwareMemoryConfig`` (other index backends).

``indexerConfig.tokenizersPoolConfig`` (llm-d-kv-cache's in-process tokenizer pool): the prompt is
tokenised in the picker from a local ``tokenizer.json`` (:mod:`.local_tokenizer`) instead of taking a
``token-producer``'s ids. ``modelName`` (required: the base model whose tokenizer is used),
``workersCount`` (threads tokenising at once, default 5, 1-64), ``minPrefixOverlapRatio`` (0-1,
default 0.8; validated, unused: pyepp's prefix cache is exact), ``local`` (``autoDiscoveryDir``,
default ``$LOCAL_TOKENIZER_DIR`` or ``/mnt/models``; ``autoDiscoveryTokenizerFileName``, default
``$LOCAL_TOKENIZER_FILENAME`` or ``tokenizer.json``; ``modelTokenizerMap``: model name -> file; absent
or null: those defaults, as llm-d's default local config). ``hf`` (a download from the HuggingFace hub)
is refused unless ``enabled: false``; ``uds`` (the deprecated tokenizer sidecar) is refused unless null.
``indexerConfig.prefixStoreConfig`` (llm-d's prefix store): ``blockSize`` (characters per cached chunk,
default 256, 16-65536) and ``cacheSize`` (chunks kept, default 65,536; llm-d's default is 500,000 chunks
of its approximate store), used by the local tokenizer's cache.

``kvEventsConfig``: ``zmqEndpoint`` (central mode: the picker binds a SUB socket there and every
server connects to it, e.g. ``tcp://*:5557``; empty: off), ``topicFilter`` (subscription prefix,
default ``kv@``), ``concurrency`` (event-processing workers, default 4, 1-1024: each publisher's
messages go to one worker's bounded queue, chosen by an FNV-1a hash of the publisher as llm-d, so a
publisher's batches are applied in order; see :mod:`datalayer.kv_events`), ``engineType`` (``vllm``
only), ``discoverPods`` (per-server mode: subscribe to each discovered endpoint's publisher, default
true), ``podDiscoveryConfig`` (``socketPort``, default 5557: the publisher's port on the endpoint's IP;
``podLabelSelector``: a Kubernetes label selector (text, as ``kubectl -l``) that an endpoint's labels
must match to be subscribed, e.g. ``llm-d.ai/role=prefill``; an endpoint that stops matching is
unsubscribed and its blocks dropped; empty (the default here): every endpoint of the pool, which
discovery selected already (llm-d-kv-cache's own pod watcher defaulted to
``llm-d.ai/inference-serving=true``; pyepp's endpoints come from the pool's selector);
``podNamespace``: the namespace whose endpoints are subscribed, empty: any; the pool's endpoints all
live in its namespace, so a different one is refused at start-up, as it would subscribe nothing).

``speculativeIndexing`` (default false): after a request is dispatched, its blocks count as held by the
chosen server for ``speculativeTTL`` (default ``2s``), until its events arrive; at most 4,096 requests
are remembered this way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.duration import parse_duration
from scheduler.errors import ConfigError
from scheduler.params import plugin_location
from scheduler.plugins.precise.hashing import ALGORITHMS
from scheduler.plugins.precise.index import DEFAULT_TIER_WEIGHTS
from scheduler.plugins.precise.local_tokenizer import (
    DEFAULT_CACHE_ENTRIES,
    DEFAULT_CHUNK_CHARS,
    DEFAULT_DIR,
    DEFAULT_FILE,
    DEFAULT_WORKERS,
    LocalTokenizerSettings,
)
from scheduler.plugins.shared.selector import LabelSelector, parse_selector_text

__all__ = ["KVEventsSettings", "PreciseParams", "parse_precise_params"]


@dataclass(frozen=True, slots=True)
class KVEventsSettings:
    """Where the KV events come from (see the module docstring)."""

    zmq_endpoint: str = ""
    topic_filter: str = "kv@"
    concurrency: int = 4
    discover_pods: bool = True
    socket_port: int = 5557
    pod_label_selector: str = ""
    pod_selector: LabelSelector = field(default_factory=LabelSelector)
    pod_namespace: str = ""


@dataclass(frozen=True, slots=True)
class PreciseParams:
    block_size: int = 16
    hash_seed: str = ""
    hash_algorithm: str = "sha256"
    max_blocks_per_source: int = 1 << 20
    max_prefix_blocks: int = 4096
    tier_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TIER_WEIGHTS))
    enable_metrics: bool = False
    metrics_logging_interval: float = 0.0
    events: KVEventsSettings = KVEventsSettings()
    speculative_indexing: bool = False
    speculative_ttl: float = 2.0
    tokenizer: LocalTokenizerSettings | None = None

    def as_yaml(self) -> dict[str, Any]:
        e = self.events
        return {
            "tokenProcessorConfig": {
                "blockSizeTokens": self.block_size,
                "hashSeed": self.hash_seed,
                "hashAlgorithm": self.hash_algorithm,
            },
            "indexerConfig": self._indexer_yaml(),
            "kvEventsConfig": {
                "zmqEndpoint": e.zmq_endpoint,
                "topicFilter": e.topic_filter,
                "concurrency": e.concurrency,
                "engineType": "vllm",
                "discoverPods": e.discover_pods,
                "podDiscoveryConfig": {
                    "socketPort": e.socket_port,
                    "podLabelSelector": e.pod_label_selector,
                    "podNamespace": e.pod_namespace,
                },
            },
            "speculativeIndexing": self.speculative_indexing,
            "speculativeTTL": self.speculative_ttl,
        }

    def _indexer_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kvBlockIndexConfig": {
                "inMemoryConfig": {"size": self.max_blocks_per_source},
                "enableMetrics": self.enable_metrics,
                "metricsLoggingInterval": f"{self.metrics_logging_interval:g}s",
            },
            "kvCacheBackendConfigs": [{"name": n, "weight": w} for n, w in self.tier_weights.items()],
            "maxPrefixBlocksToMatch": self.max_prefix_blocks,
        }
        t = self.tokenizer
        if t is not None:
            out["tokenizersPoolConfig"] = t.as_yaml()
            out["prefixStoreConfig"] = {"blockSize": t.chunk_chars, "cacheSize": t.cache_entries}
        return out


_TOP = ("tokenProcessorConfig", "indexerConfig", "kvEventsConfig", "speculativeIndexing", "speculativeTTL")
_TOKEN = ("blockSize", "blockSizeTokens", "hashSeed", "hashAlgorithm")
_INDEXER = (
    "kvBlockIndexConfig",
    "kvCacheBackendConfigs",
    "maxPrefixBlocksToMatch",
    "tokenProcessorConfig",
    "tokenizersPoolConfig",
    "prefixStoreConfig",
)
_BLOCK_INDEX = (
    "inMemoryConfig",
    "enableMetrics",
    "metricsLoggingInterval",
    "maxPrefixBlocksToMatch",
    "redisConfig",
    "costAwareMemoryConfig",
)
_EVENTS = ("zmqEndpoint", "topicFilter", "concurrency", "engineType", "discoverPods", "podDiscoveryConfig")
_POD = ("podLabelSelector", "podNamespace", "socketPort", "replaySocketPort")


class _Reader:
    def __init__(self, plugin_type: str, name: str) -> None:
        self.where = plugin_location(plugin_type, name)

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(message, location=f"{self.where}: parameters{'.' + path if path else ''}")

    def mapping(self, value: Any, path: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected a mapping, got {value!r}")
        for key in value:
            if key not in keys:
                raise self.fail(
                    f"{path}.{key}" if path else str(key),
                    f"unknown parameter (expected one of {', '.join(keys)})",
                )
        return value

    def integer(self, value: Any, path: str, default: int, low: int, high: int = 1 << 62) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(path, f"expected an integer in [{low}, {high}], got {value!r}")
        return value

    def boolean(self, value: Any, path: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false, got {value!r}")
        return value

    def string(self, value: Any, path: str, default: str) -> str:
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {value!r}")
        return value

    def duration(self, value: Any, path: str, default: float, nanos: bool) -> float:
        if value is None or value == "":
            return default
        if nanos and isinstance(value, int) and not isinstance(value, bool):
            seconds = value / 1e9  # a Go time.Duration serialised as a number is nanoseconds
        else:
            try:
                seconds = parse_duration(value)
            except ValueError:
                raise self.fail(path, f'expected a duration such as "2s", got {value!r}') from None
        if seconds < 0:
            raise self.fail(path, f"expected a non-negative duration, got {value!r}")
        return seconds


def parse_precise_params(parameters: Any, plugin_type: str, name: str) -> PreciseParams:
    """Validate llm-d's parameters; a ConfigError names the field at fault and the expectation."""
    r = _Reader(plugin_type, name)
    top = r.mapping(parameters, "", _TOP)
    idx = r.mapping(top.get("indexerConfig"), "indexerConfig", _INDEXER)
    if top.get("tokenProcessorConfig") is not None and idx.get("tokenProcessorConfig") is not None:
        raise r.fail("indexerConfig.tokenProcessorConfig", "set tokenProcessorConfig in one place only")
    if idx.get("tokenProcessorConfig") is not None:  # where llm-d-kv-cache-manager's Config had it
        tok = r.mapping(idx["tokenProcessorConfig"], "indexerConfig.tokenProcessorConfig", _TOKEN)
    else:
        tok = r.mapping(top.get("tokenProcessorConfig"), "tokenProcessorConfig", _TOKEN)
    size = r.integer(tok.get("blockSizeTokens"), "tokenProcessorConfig.blockSizeTokens", 0, 0, 1 << 20)
    old = r.integer(tok.get("blockSize"), "tokenProcessorConfig.blockSize", 0, 0, 1 << 20)
    block_size = size or old or 16
    seed = tok.get("hashSeed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        seed = str(seed)
    seed = r.string(seed, "tokenProcessorConfig.hashSeed", "")
    algorithm = r.string(tok.get("hashAlgorithm"), "tokenProcessorConfig.hashAlgorithm", "") or "sha256"
    if algorithm not in ALGORITHMS:
        raise r.fail(
            "tokenProcessorConfig.hashAlgorithm",
            f"expected the model servers' --prefix-caching-hash-algo ({', '.join(ALGORITHMS)}), got "
            f"{algorithm!r} (llm-d's own key algorithms cbor-fnv / xxh64 do not apply: pyepp matches the "
            "servers' hashes)",
        )
    tokenizer = _tokenizer(r, idx.get("tokenizersPoolConfig"), idx.get("prefixStoreConfig"))
    block_index = r.mapping(idx.get("kvBlockIndexConfig"), "indexerConfig.kvBlockIndexConfig", _BLOCK_INDEX)
    for backend in ("redisConfig", "costAwareMemoryConfig"):
        if block_index.get(backend) is not None:
            raise r.fail(
                f"indexerConfig.kvBlockIndexConfig.{backend}",
                "only the in-memory index (inMemoryConfig) is available in pyepp",
            )
    in_memory = r.mapping(
        block_index.get("inMemoryConfig"),
        "indexerConfig.kvBlockIndexConfig.inMemoryConfig",
        ("size", "podCacheSize"),
    )
    capacity = r.integer(
        in_memory.get("size"), "indexerConfig.kvBlockIndexConfig.inMemoryConfig.size", 1 << 20, 1
    )
    if in_memory.get("podCacheSize") is not None:
        raise r.fail(
            "indexerConfig.kvBlockIndexConfig.inMemoryConfig.podCacheSize",
            "has no counterpart in pyepp: it caps the servers llm-d's key-to-servers index remembers per "
            "block, while pyepp keeps one key set per server (bounded by inMemoryConfig.size) and knows "
            "every server holding a block; leave it unset",
        )
    metrics = r.boolean(
        block_index.get("enableMetrics"), "indexerConfig.kvBlockIndexConfig.enableMetrics", False
    )
    interval = r.duration(
        block_index.get("metricsLoggingInterval"),
        "indexerConfig.kvBlockIndexConfig.metricsLoggingInterval",
        0.0,
        nanos=True,
    )
    weights = _weights(r, idx.get("kvCacheBackendConfigs"))
    nested = block_index.get("maxPrefixBlocksToMatch")  # the older llm-d location
    where = "indexerConfig." + (
        "kvBlockIndexConfig.maxPrefixBlocksToMatch" if nested is not None else "maxPrefixBlocksToMatch"
    )
    max_blocks = r.integer(idx.get("maxPrefixBlocksToMatch", nested), where, 4096, 1)
    ev = r.mapping(top.get("kvEventsConfig"), "kvEventsConfig", _EVENTS)
    engine = r.string(ev.get("engineType"), "kvEventsConfig.engineType", "vllm") or "vllm"
    if engine != "vllm":
        raise r.fail(
            "kvEventsConfig.engineType", f"only vllm's KV events are decoded by pyepp, got {engine!r}"
        )
    endpoint = r.string(ev.get("zmqEndpoint"), "kvEventsConfig.zmqEndpoint", "")
    if endpoint and not endpoint.startswith(("tcp://", "ipc://", "inproc://")):
        raise r.fail(
            "kvEventsConfig.zmqEndpoint", f"expected a ZMQ endpoint such as tcp://*:5557, got {endpoint!r}"
        )
    pod = r.mapping(ev.get("podDiscoveryConfig"), "kvEventsConfig.podDiscoveryConfig", _POD)
    selector_text = r.string(
        pod.get("podLabelSelector"), "kvEventsConfig.podDiscoveryConfig.podLabelSelector", ""
    )
    try:
        selector = parse_selector_text(selector_text)
    except ValueError as exc:
        raise r.fail(
            "kvEventsConfig.podDiscoveryConfig.podLabelSelector",
            f"expected a Kubernetes label selector such as llm-d.ai/role=decode: {exc}",
        ) from None
    replay = r.integer(
        pod.get("replaySocketPort"), "kvEventsConfig.podDiscoveryConfig.replaySocketPort", 0, -1, 65535
    )
    if replay > 0:
        raise r.fail(
            "kvEventsConfig.podDiscoveryConfig.replaySocketPort",
            "replaying missed batches is not available in pyepp (gaps are counted; leave it unset)",
        )
    events = KVEventsSettings(
        zmq_endpoint=endpoint,
        topic_filter=r.string(ev.get("topicFilter"), "kvEventsConfig.topicFilter", "kv@"),
        concurrency=r.integer(ev.get("concurrency"), "kvEventsConfig.concurrency", 4, 1, 1024),
        discover_pods=r.boolean(ev.get("discoverPods"), "kvEventsConfig.discoverPods", True),
        socket_port=r.integer(
            pod.get("socketPort"), "kvEventsConfig.podDiscoveryConfig.socketPort", 5557, 1, 65535
        ),
        pod_label_selector=str(selector),
        pod_selector=selector,
        pod_namespace=r.string(pod.get("podNamespace"), "kvEventsConfig.podDiscoveryConfig.podNamespace", ""),
    )
    if not events.zmq_endpoint and not events.discover_pods:
        raise r.fail(
            "kvEventsConfig.discoverPods",
            "with discoverPods false, set kvEventsConfig.zmqEndpoint: no KV events would reach the index",
        )
    return PreciseParams(
        block_size=block_size,
        hash_seed=seed,
        hash_algorithm=algorithm,
        max_blocks_per_source=capacity,
        max_prefix_blocks=max_blocks,
        tier_weights=weights,
        enable_metrics=metrics,
        metrics_logging_interval=interval,
        events=events,
        speculative_indexing=r.boolean(top.get("speculativeIndexing"), "speculativeIndexing", False),
        speculative_ttl=r.duration(top.get("speculativeTTL"), "speculativeTTL", 2.0, nanos=False),
        tokenizer=tokenizer,
    )


_POOL = ("modelName", "workersCount", "minPrefixOverlapRatio", "local", "hf", "uds")
_LOCAL = ("autoDiscoveryDir", "autoDiscoveryTokenizerFileName", "modelTokenizerMap")


def _tokenizer(r: _Reader, raw: Any, store_raw: Any) -> LocalTokenizerSettings | None:
    """``tokenizersPoolConfig`` (local backend) and ``prefixStoreConfig``; None: no pool configured."""
    where = "indexerConfig.tokenizersPoolConfig"
    store = r.mapping(store_raw, "indexerConfig.prefixStoreConfig", ("cacheSize", "blockSize"))
    chunk = r.integer(
        store.get("blockSize"), "indexerConfig.prefixStoreConfig.blockSize", DEFAULT_CHUNK_CHARS, 16, 65536
    )
    entries = r.integer(
        store.get("cacheSize"), "indexerConfig.prefixStoreConfig.cacheSize", DEFAULT_CACHE_ENTRIES, 1, 1 << 24
    )
    if raw is None:
        return None
    pool = r.mapping(raw, where, _POOL)
    hf = pool.get("hf")
    if hf is not None:
        hf_map = r.mapping(hf, f"{where}.hf", ("enabled", "huggingFaceToken", "tokenizersCacheDir"))
        if hf_map.get("enabled") is not False:
            raise r.fail(
                f"{where}.hf",
                "pyepp never downloads a tokenizer from the HuggingFace hub: put the model's tokenizer.json "
                "in a directory the picker can read and use 'local' (or set hf.enabled: false)",
            )
    if pool.get("uds") is not None:
        raise r.fail(
            f"{where}.uds",
            "the gRPC-over-UDS tokenizer sidecar (deprecated upstream) is not available in pyepp: use "
            "'local' (a tokenizer.json on disk) or a token-producer with vllm.url",
        )
    model = r.string(pool.get("modelName"), f"{where}.modelName", "")
    if not model:
        raise r.fail(f"{where}.modelName", "the base model whose tokenizer is used must be set")
    workers = r.integer(pool.get("workersCount"), f"{where}.workersCount", 0, 0, 64) or DEFAULT_WORKERS
    ratio = pool.get("minPrefixOverlapRatio")
    number = isinstance(ratio, int | float) and not isinstance(ratio, bool)
    if ratio is not None and (not number or not 0 <= ratio <= 1):
        raise r.fail(f"{where}.minPrefixOverlapRatio", f"expected a number in [0, 1], got {ratio!r}")
    local = r.mapping(pool.get("local"), f"{where}.local", _LOCAL)
    directory = r.string(local.get("autoDiscoveryDir"), f"{where}.local.autoDiscoveryDir", "")
    file_name = r.string(
        local.get("autoDiscoveryTokenizerFileName"), f"{where}.local.autoDiscoveryTokenizerFileName", ""
    )
    if "/" in file_name:
        raise r.fail(
            f"{where}.local.autoDiscoveryTokenizerFileName", f"expected a file name, got {file_name!r}"
        )
    mapping = local.get("modelTokenizerMap") or {}
    if not isinstance(mapping, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in mapping.items()
    ):
        raise r.fail(
            f"{where}.local.modelTokenizerMap",
            f"expected a mapping of model name to tokenizer.json path, got {mapping!r}",
        )
    return LocalTokenizerSettings(
        model_name=model,
        workers=workers,
        discovery_dir=directory or os.environ.get("LOCAL_TOKENIZER_DIR") or DEFAULT_DIR,
        file_name=file_name or os.environ.get("LOCAL_TOKENIZER_FILENAME") or DEFAULT_FILE,
        model_map=dict(mapping),
        min_overlap=0.8 if ratio is None else float(ratio),
        chunk_chars=chunk,
        cache_entries=entries,
    )


def _weights(r: _Reader, raw: Any) -> dict[str, float]:
    if raw is None:
        return dict(DEFAULT_TIER_WEIGHTS)
    if not isinstance(raw, list) or not raw:
        raise r.fail(
            "indexerConfig.kvCacheBackendConfigs", f"expected a list of {{name, weight}}, got {raw!r}"
        )
    out: dict[str, float] = {}
    for i, item in enumerate(raw):
        path = f"indexerConfig.kvCacheBackendConfigs[{i}]"
        entry = r.mapping(item, path, ("name", "weight"))
        name = r.string(entry.get("name"), f"{path}.name", "")
        weight = entry.get("weight")
        if not name:
            raise r.fail(f"{path}.name", "expected a tier name such as gpu or cpu")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1:
            raise r.fail(f"{path}.weight", f"expected a number in [0, 1], got {weight!r}")
        out[name.lower()] = float(weight)
    return out
