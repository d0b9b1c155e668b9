"""Data-layer benchmark: scraper CPU share and snapshot age at the 50 ms refresh interval.

Usage: ``epp-bench datalayer [--endpoints 64,256] [--seconds 10] [--interval 0.05] [--client aiohttp]``.

A subprocess serves ``N`` simulated vLLM ``/metrics`` + ``/v1/models`` endpoints (aiohttp, one port
each, realistic ~30 KB bodies whose gauges change every request). This process runs only the data
layer (static discovery, the real HTTP client) and, after a warm-up, measures for ``--seconds``:

* **CPU share**: (user + system CPU of this process, from ``resource.getrusage``) / wall time, i.e. the
  fraction of one core the scraper uses (target <= 0.25 at 64 endpoints);
* **snapshot age**: every 10 ms, for every endpoint in ``snapshot()``, ``now - metrics.updated_at``;
  reported as p50 / p99 / max (target p99 <= 100 ms);
* the scrape rate achieved and the number of endpoints that were not ready at the end.

It also times the parsers on one body: our ``datalayer.promtext`` (all samples and the filtered fast
path) against ``prometheus_client.parser``.
"""

from __future__ import annotations

import random

__all__ = ["vllm_metrics_text"]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_BUCKETS_LONG = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)
_BUCKETS_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", _BUCKETS_S),
    ("vllm:inter_token_latency_seconds", _BUCKETS_S),
    ("vllm:time_per_output_token_seconds", _BUCKETS_S),
    ("vllm:e2e_request_latency_seconds", _BUCKETS_LONG),
    ("vllm:request_queue_time_seconds", _BUCKETS_LONG),
    ("vllm:request_inference_time_seconds", _BUCKETS_LONG),
    ("vllm:request_prefill_time_seconds", _BUCKETS_LONG),
    ("vllm:request_decode_time_seconds", _BUCKETS_LONG),
    ("vllm:request_prompt_tokens", _BUCKETS_TOKENS),
    ("vllm:request_generation_tokens", _BUCKETS_TOKENS),
    ("vllm:iteration_tokens_total", _BUCKETS_TOKENS),
    ("vllm:request_max_num_generation_tokens", _BUCKETS_TOKENS),
    ("vllm:request_params_max_tokens", _BUCKETS_TOKENS),
)


def vllm_metrics_text(waiting: int = 0, running: int = 0, kv: float = 0.0, seed: int = 0) -> str:
    """A /metrics body shaped like vLLM 0.10's (process + vllm families, 13 histograms, ~30 KB)."""
    rng = random.Random(seed)
    m = f'engine="0",model_name="{MODEL}"'
    out = [f'python_gc_objects_collected_total{{generation="{g}"}} {rng.randint(0, 9)}.0' for g in range(3)]
    out.append("# HELP process_resident_memory_bytes Resident memory size in bytes.")
    out.append("# TYPE process_resident_memory_bytes gauge")
    out.append(f"process_resident_memory_bytes {rng.randint(10**9, 10**10)}.0")
    out.append(f"process_cpu_seconds_total {rng.random() * 1e4:.2f}")
    gauges = (
        ("vllm:num_requests_running", float(running)),
        ("vllm:num_requests_waiting", float(waiting)),
        ("vllm:kv_cache_usage_perc", kv),
    )
    for name, value in gauges:
        out += [f"# HELP {name} gauge of the engine.", f"# TYPE {name} gauge", f"{name}{{{m}}} {value!r}"]
    out.append("# TYPE vllm:lora_requests_info gauge")
    out.append(
        'vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora",waiting_lora_adapters=""} '
        f"{1.7e9 + seed}"
    )
    out.append("# TYPE vllm:cache_config_info gauge")
    out.append(
        f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",enable_prefix_caching="True",{m},'
        'gpu_memory_utilization="0.9",num_cpu_blocks="2048",num_gpu_blocks="16384",swap_space="4"} 1.0'
    )
    for name in ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens", "generation_tokens"):
        out += [f"# TYPE vllm:{name}_total counter", f"vllm:{name}_total{{{m}}} {rng.randint(0, 10**8)}.0"]
    for reason in ("stop", "length", "abort"):
        out.append(f'vllm:request_success_total{{finished_reason="{reason}",{m}}} {rng.randint(0, 10**5)}.0')
    for name, bounds in _HISTOGRAMS:
        out.append(f"# HELP {name} Histogram of {name}.")
        out.append(f"# TYPE {name} histogram")
        count = 0
        for bound in bounds:
            count += rng.randint(0, 500)
            out.append(f'{name}_bucket{{{m},le="{float(bound)!r}"}} {count}.0')
        out.append(f'{name}_bucket{{{m},le="+Inf"}} {count}.0')
        out.append(f"{name}_count{{{m}}} {count}.0")
        out.append(f"{name}_sum{{{m}}} {rng.random() * count:.4f}")
    return "\n".join(out) + "\n"
