"""Prometheus text exposition of an engine's state, rendered by hand (no registry on the hot path).

The picker scrapes ``/metrics`` every 50 ms per server, so :func:`render_metrics` formats the engine's
gauges, counters and histograms straight into text (``# HELP``/``# TYPE`` lines, then samples), which
``prometheus_client.parser`` accepts. Every sample carries ``model_name``. Metric names and label sets
are vLLM's; ``vllm:lora_requests_info``'s value is the Unix time of the last change of its labels, and
``vllm:kv_cache_usage_perc`` is a fraction in [0, 1] like vLLM's (also exposed under its pre-v1 name
``vllm:gpu_cache_usage_perc``).
"""

from __future__ import annotations

from simulator.engine import Engine
from simulator.stats import Histogram

__all__ = ["CONTENT_TYPE", "render_metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(value: float) -> str:
    return repr(float(value))


def _header(out: list[str], name: str, kind: str, help_: str) -> None:
    out.append(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n")


def _histogram(out: list[str], name: str, help_: str, labels: str, h: Histogram) -> None:
    _header(out, name, "histogram", help_)
    cumulative = h.cumulative()
    for bound, count in zip(h.bounds, cumulative, strict=False):
        out.append(f'{name}_bucket{{{labels},le="{bound!r}"}} {count}.0\n')
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {cumulative[-1]}.0\n')
    out.append(f"{name}_sum{{{labels}}} {_fmt(h.total)}\n{name}_count{{{labels}}} {h.count}.0\n")


def render_metrics(engine: Engine) -> bytes:
    """The full ``/metrics`` text for one engine."""
    c = engine.config
    st = engine.stats
    m = f'model_name="{_esc(c.metric_model_name)}"'
    out: list[str] = []
    gauges = (
        ("vllm:num_requests_running", "Number of requests in model execution batches.", engine.num_running),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", engine.num_waiting),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engine.kv.usage),
        # the pre-v1 name, still the default of older picker configurations (vLLM <= 0.10 exposed both)
        ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage (deprecated alias).", engine.kv.usage),
    )
    for name, help_, value in gauges:
        _header(out, name, "gauge", help_)
        out.append(f"{name}{{{m}}} {_fmt(value)}\n")
    _header(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    out.append(
        f'vllm:cache_config_info{{{m},block_size="{c.block_size}",num_gpu_blocks="{c.kv_cache_size}",'
        f'enable_prefix_caching="True"}} 1.0\n'
    )
    _header(out, "vllm:lora_requests_info", "gauge", "Running stats on lora requests.")
    running = ",".join(sorted(engine.lora.running()))
    waiting = ",".join(sorted(engine.waiting_lora))
    out.append(
        f'vllm:lora_requests_info{{{m},max_lora="{c.max_loras}",running_lora_adapters="{_esc(running)}",'
        f'waiting_lora_adapters="{_esc(waiting)}"}} {_fmt(engine.lora_info_updated)}\n'
    )
    counters = (
        ("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", st.prefix_cache_queries),
        ("vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens.", st.prefix_cache_hits),
        ("vllm:prompt_tokens", "Number of prefill tokens processed.", st.prompt_tokens),
        ("vllm:generation_tokens", "Number of generation tokens processed.", st.generation_tokens),
    )
    for name, help_, value in counters:
        _header(out, name + "_total", "counter", help_)
        out.append(f"{name}_total{{{m}}} {value}.0\n")
    _header(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.")
    for reason, value in st.success.items():
        out.append(f'vllm:request_success_total{{{m},finish_reason="{_esc(reason)}"}} {value}.0\n')
    histograms = (
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", st.ttft),
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", st.itl),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", st.e2e),
        ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase.", st.queue_time),
    )
    for name, help_, hist in histograms:
        _histogram(out, name, help_, m, hist)
    return "".join(out).encode()
