"""Shared helpers of the simulator tests (not a test module)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
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


async def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll ``predicate`` every 5 ms until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)
