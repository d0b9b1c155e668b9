"""Shared helpers of the simulator tests (not a test module)."""

from __future__ import annotations

from typing import Any

from simulator.config import LoraModule, SimConfig

MODEL = "sim-model"


def sim_config(**overrides: Any) -> SimConfig:
    """A small, fast configuration on a free port; ``overrides`` replace fields."""
    fields: dict[str, Any] = {
        "model": MODEL,
        "port": 0,
        "time_scale": 50.0,
        "max_num_seqs": 4,
        "block_size": 4,
        "kv_cache_size": 256,
        "prefill_overhead": 0.02,
        "prefill_time_per_token": 0.0005,
        "inter_token_latency": 0.01,
        "lora_modules": (LoraModule("sql-lora", "/adapters/sql"),),
        "max_loras": 2,
    }
    fields.update(overrides)
    return SimConfig(**fields)
