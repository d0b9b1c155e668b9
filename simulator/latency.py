"""The latency model (pure functions of the configuration, the load and a seeded random source).

* load factor ``f = 1 + (time_factor_under_load - 1) * (running - 1) / (max_num_seqs - 1)``
  (``f = 1`` when ``max_num_seqs == 1``); ``running`` counts the request itself.
* TTFT ``= f * (prefill_overhead + (prompt_tokens - cached_tokens) * prefill_time_per_token)``, or
  ``f * jitter(time_to_first_token, std_dev)`` when a fixed ``time_to_first_token`` is configured.
* inter-token latency ``= f * jitter(inter_token_latency, std_dev)``; decode of ``n`` output tokens takes
  ``n - 1`` such gaps.
* ``jitter(mean, sd)`` is a Gaussian draw clamped to ``[max(0, mean - 3 sd), mean + 3 sd]``.

All times are simulated seconds.
"""

from __future__ import annotations

import random

from simulator.config import SimConfig

__all__ = ["LatencyModel"]


class LatencyModel:
    """Computes TTFT and inter-token gaps; the only state is the injected random source."""

    __slots__ = ("_cfg", "_itl", "_itl_sd", "_rng", "_slope")

    def __init__(self, config: SimConfig, rng: random.Random) -> None:
        self._cfg = config
        self._rng = rng
        self._itl = config.inter_token_latency
        self._itl_sd = config.inter_token_latency_std_dev
        self._slope = (
            (config.time_factor_under_load - 1.0) / (config.max_num_seqs - 1)
            if config.max_num_seqs > 1
            else 0.0
        )

    def load_factor(self, running: int) -> float:
        return 1.0 + self._slope * max(running - 1, 0)

    def _jitter(self, mean: float, sd: float) -> float:
        if sd <= 0.0:
            return mean
        value = self._rng.gauss(mean, sd)
        return min(max(value, mean - 3 * sd, 0.0), mean + 3 * sd)

    def ttft(self, prompt_tokens: int, cached_tokens: int, running: int) -> float:
        c = self._cfg
        if c.time_to_first_token > 0:
            base = self._jitter(c.time_to_first_token, c.time_to_first_token_std_dev)
        else:
            base = c.prefill_overhead + max(prompt_tokens - cached_tokens, 0) * c.prefill_time_per_token
        return base * self.load_factor(running)

    def inter_token(self, running: int) -> float:
        return self._jitter(self._itl, self._itl_sd) * self.load_factor(running)
