"""llm-d's KV-cache event and index metrics, read from the KV-event feeds at every scrape.

Names, types and labels are llm-d-router's (``pkg/kvcache/metrics/collector.go``, commit
ebab687927f5331c1b39defcb579a07951bce56c); they are outside ``pkg/epp/metrics`` and so outside
:mod:`epp.server.metric_catalog`. Registered when a ``precise-prefix-cache-*`` plugin runs (upstream
registers them with its event pool); figures of several such plugins are summed.

Always (llm-d names only, no deprecated twin):

* ``llm_d_epp_kv_cache_events_active_subscribers`` (gauge): ZMQ sockets held (per endpoint, plus
  the central one);
* ``llm_d_epp_kv_cache_events_messages_received_total{pod_identifier}``: messages received per
  subscriber (the endpoint's address; ``local-subscriber`` for the central socket);
* ``llm_d_epp_kv_cache_events_zmq_errors_total{pod_identifier,operation}`` (``connect``, ``bind``,
  ``recv``) and ``llm_d_epp_kv_cache_events_subscriber_reconnections_total{pod_identifier}``;
* ``llm_d_epp_kv_cache_events_pool_queue_depth`` / ``..._pool_capacity`` (gauges): messages queued
  across the worker shards, and the shard count (``kvEventsConfig.concurrency``);
* ``llm_d_epp_kv_cache_events_stores_skipped_total{cache_kind,reason}``: stored events of
  non-attention cache groups (reason ``unsupported_cache_kind``).

With ``indexerConfig.kvBlockIndexConfig.enableMetrics`` (of any such plugin; upstream records them only
then), each also under its deprecated ``kvcache_index_*`` name: ``..._kv_cache_index_admissions_total``
and ``..._evictions_total`` (block keys stored / removed), ``..._lookup_requests_total``,
``..._lookup_hits_total`` and ``..._max_pod_hit_count_total`` (per lookup, the longest consecutive
prefix any endpoint holds, in blocks) and ``..._lookup_latency_seconds`` (histogram, Prometheus'
default buckets).

Not exported: the dedup filter's ``dedup_removed_hashes_*`` and ``removals_skipped`` (pyepp's index
has no reference-counted dedup filter and applies every removal). ``--metrics-naming llm-d`` drops the
deprecated names, ``inference`` keeps only them. Series per subscriber are bounded by the pool's
endpoints (a removed endpoint's series are deleted).

Ours, with an in-process tokenizer (``indexerConfig.tokenizersPoolConfig``, :class:`LocalTokenizerCollector`):
``pyepp_precise_tokenizer_tokens_total{plugin_name,source}`` (token ids taken from the prefix cache,
``source="cache"``, or computed by the tokenizer, ``source="tokenizer"``: their ratio is the cache's
worth) and ``pyepp_precise_tokenizer_cached_chunks{plugin_name}`` (chunks held).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from datalayer.kv_events import KVEventFeed
from epp.server.metric_catalog import Naming, Scheme
from scheduler.plugins.precise.lookup_stats import DEFAULT_BUCKETS
from scheduler.plugins.precise.producer import PrecisePrefixCacheProducer

__all__ = ["KVCacheCollector", "LocalTokenizerCollector"]

_E = "llm_d_epp_kv_cache_events_"
_I = "llm_d_epp_kv_cache_index_"
_OLD = "kvcache_index_"
_POD = "pod_identifier"


class KVCacheCollector(Collector):
    """Exports the figures of ``feeds`` (see the module docstring)."""

    def __init__(self, feeds: Sequence[KVEventFeed], naming: Naming = Naming.BOTH) -> None:
        self.feeds = tuple(feeds)
        self.current = naming.exports(Scheme.LLM_D)
        self.deprecated = naming.exports(Scheme.INFERENCE)

    def collect(self) -> Iterator[Metric]:
        if not self.feeds:
            return
        if self.current:
            yield from self._events()
        if any(f.sink.settings.enable_metrics for f in self.feeds):
            yield from self._index()

    def _events(self) -> Iterator[Metric]:
        stats = [f.stats() for f in self.feeds]
        yield _gauge(
            _E + "active_subscribers", "ZMQ subscribers held.", sum(s["subscriptions"] for s in stats)
        )
        received = CounterMetricFamily(
            _E + "messages_received", "Messages received from ZMQ subscribers.", labels=[_POD]
        )
        errors = CounterMetricFamily(_E + "zmq_errors", "ZMQ subscriber errors.", labels=[_POD, "operation"])
        retries = CounterMetricFamily(
            _E + "subscriber_reconnections", "ZMQ subscriber reconnection attempts.", labels=[_POD]
        )
        skipped = CounterMetricFamily(
            _E + "stores_skipped",
            "KV-cache store events skipped before prefix indexing.",
            labels=["cache_kind", "reason"],
        )
        for name, value in _summed(f.received for f in self.feeds):
            received.add_metric([name], value)
        for (name, op), value in _summed(f.errors for f in self.feeds):
            errors.add_metric([name, op], value)
        for name, value in _summed(f.reconnections for f in self.feeds):
            retries.add_metric([name], value)
        for kind, value in _summed(f.sink.ingester.skipped_stores for f in self.feeds):
            skipped.add_metric([kind, "unsupported_cache_kind"], value)
        yield from (received, errors, retries, skipped)
        yield _gauge(_E + "pool_queue_depth", "Messages queued across all worker shards.",
                     sum(s["queue_depth"] for s in stats))  # fmt: skip
        yield _gauge(_E + "pool_capacity", "Worker shards of the event processing pool.",
                     sum(s["concurrency"] for s in stats))  # fmt: skip

    def _index(self) -> Iterator[Metric]:
        feeds = [f for f in self.feeds if f.sink.settings.enable_metrics]
        lookups = [s for f in feeds if (s := getattr(f.sink, "lookup_stats", None)) is not None]
        counters = (
            ("admissions", "KV-block admissions.", sum(f.sink.ingester.admitted for f in feeds)),
            ("evictions", "KV-block evictions.", sum(f.sink.ingester.evicted for f in feeds)),
            ("lookup_requests", "Lookup calls.", sum(s.lookups for s in lookups)),
            ("max_pod_hit_count", "Longest consecutive per-endpoint prefix per lookup, summed.",
             sum(s.hits for s in lookups)),
            ("lookup_hits", "Consecutive prefix blocks matched by the best endpoint per lookup.",
             sum(s.hits for s in lookups)),
        )  # fmt: skip
        for name, doc, value in counters:
            for prefix in self._prefixes():
                yield CounterMetricFamily(prefix + name, doc, value=value)
        bounds = DEFAULT_BUCKETS
        counts = [sum(col) for col in zip(*(s.buckets for s in lookups), strict=True)] or [0] * (
            len(bounds) + 1
        )
        total = sum(s.seconds for s in lookups)
        cumulative: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*bounds, float("inf")), counts, strict=True):
            running += count
            cumulative.append(("+Inf" if bound == float("inf") else repr(bound), running))
        for prefix in self._prefixes():
            hist = HistogramMetricFamily(prefix + "lookup_latency_seconds", "Latency of lookups in seconds.")
            hist.add_metric([], cumulative, sum_value=total)
            yield hist

    def _prefixes(self) -> list[str]:
        return [p for p, on in ((_I, self.current), (_OLD, self.deprecated)) if on]


class LocalTokenizerCollector(Collector):
    """The in-process tokenizers' cache figures (see the module docstring), one series per plugin."""

    def __init__(self, producers: Sequence[PrecisePrefixCacheProducer]) -> None:
        self.producers = tuple(p for p in producers if p.local is not None)

    def collect(self) -> Iterator[Metric]:
        tokens = CounterMetricFamily(
            "pyepp_precise_tokenizer_tokens",
            "Token ids of prompts tokenised in process, from the prefix cache or the tokenizer.",
            labels=["plugin_name", "source"],
        )
        chunks = GaugeMetricFamily(
            "pyepp_precise_tokenizer_cached_chunks",
            "Prompt chunks held by the in-process tokenizer's prefix cache.",
            labels=["plugin_name"],
        )
        for p in self.producers:
            tok = p.local
            assert tok is not None
            tokens.add_metric([p.name, "cache"], tok.cached_tokens)
            tokens.add_metric([p.name, "tokenizer"], tok.encoded_tokens)
            chunks.add_metric([p.name], tok.cache_entries)
        yield tokens
        yield chunks

    def describe(self) -> Iterator[Metric]:
        return iter(())


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _summed(maps: Iterator[Any]) -> list[tuple[Any, int]]:
    total: dict[Any, int] = {}
    for m in maps:
        for key, value in m.items():
            total[key] = total.get(key, 0) + value
    return sorted(total.items())
