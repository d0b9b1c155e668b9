"""``epp-bench latency-model``: the predicted-latency model against simpler alternatives, offline.

A seeded stream of requests on a heterogeneous fleet (servers 1x, 1.5x and 3x slower than the fastest,
as the simulator's per-server ``--prefill-*`` / ``--inter-token-latency`` flags make them) with the
simulator's latency shape: TTFT = queueing on the in-flight prefill work + ``(overhead +
uncached tokens x per-token cost) x load factor``, the load factor growing with running requests
(decode slows with batch size), TPOT = ``inter-token latency x load factor``, every value with
lognormal noise (sigma 0.1). Each model predicts a request before learning from it (refit every
``--refit-every`` samples, as the picker's background trainer batches them); after ``--warmup``
samples the median absolute percentage errors of TTFT and TPOT are printed, with the cost per
prediction and per learnt sample (CPU microseconds on this machine, single thread). Then the added
picker CPU per request of the whole predicted-latency profile against the default one
(:mod:`bench.latency_cpu`, ``--cpu-endpoints`` endpoints, 16 by default; target at most 100 µs).

Models: ``ridge-per-endpoint`` (pyepp's: global ridge plus per-endpoint ridge shrunk toward it),
``ridge-global`` (the same features, one model for the fleet, as upstream's sidecar without a pod
feature), ``ewma-per-endpoint`` (each endpoint's exponentially weighted mean latency, alpha 0.05: the
"one gauge" baseline).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.latency_cpu import TARGET_US, measure_added_cpu
from epp.config.flags import ManualHelpFormatter
from scheduler.plugins.latency.model import Features, LatencyModel

__all__ = ["Result", "evaluate", "main"]

SPEEDS = (1.0, 1.0, 1.5, 1.5, 3.0, 3.0)


@dataclass(frozen=True, slots=True)
class Result:
    model: str
    ttft_mape: float
    tpot_mape: float
    predict_us: float
    learn_us: float


def _truth(rng: random.Random, speed: float, f: Features) -> tuple[float, float]:
    load = 1.0 + (2.0 - 1.0) * max(f.running - 1, 0) / 15.0
    prefill = speed * (30.0 + 0.25 * f.uncached_tokens) * load
    queueing = speed * 0.25 * f.prefill_tokens_in_flight + 20.0 * f.waiting * speed
    ttft = (queueing + prefill) * math.exp(rng.gauss(0.0, 0.1))
    tpot = speed * 12.0 * load * math.exp(rng.gauss(0.0, 0.1))
    return ttft, tpot


def _request(rng: random.Random) -> Features:
    prompt = rng.randint(64, 4096)
    return Features(
        input_tokens=prompt,
        uncached_tokens=int(prompt * rng.choice((1.0, 1.0, 0.5, 0.1))),
        prefill_tokens_in_flight=rng.choice((0, 0, rng.randint(0, 6000))),
        waiting=rng.choice((0, 0, 0, rng.randint(1, 5))),
        running=rng.randint(0, 16),
        kv_usage=rng.random() * 0.9,
    )


class _Ewma:
    def __init__(self) -> None:
        self.means: dict[str, tuple[float, float]] = {}

    def predict(self, endpoint: str, f: Features) -> tuple[float, float] | None:
        return self.means.get(endpoint)

    def observe(self, endpoint: str, f: Features, ttft: float, tpot: float) -> None:
        old = self.means.get(endpoint)
        self.means[endpoint] = (ttft, tpot) if old is None else (
            old[0] + 0.05 * (ttft - old[0]), old[1] + 0.05 * (tpot - old[1])
        )  # fmt: skip

    def refit(self) -> None:
        return


class _Ridge:
    def __init__(self, per_endpoint: bool) -> None:
        self.model = LatencyModel()
        self.per_endpoint = per_endpoint

    def predict(self, endpoint: str, f: Features) -> tuple[float, float] | None:
        return self.model.predict(endpoint if self.per_endpoint else "fleet", f)

    def observe(self, endpoint: str, f: Features, ttft: float, tpot: float) -> None:
        self.model.observe(endpoint if self.per_endpoint else "fleet", f, ttft, tpot)

    def refit(self) -> None:
        self.model.refit()


MODELS: dict[str, Callable[[], _Ridge | _Ewma]] = {
    "ridge-per-endpoint": lambda: _Ridge(True),
    "ridge-global": lambda: _Ridge(False),
    "ewma-per-endpoint": _Ewma,
}


def evaluate(name: str, samples: int, warmup: int, refit_every: int, seed: int) -> Result:
    """Run one model over the seeded stream (see the module docstring)."""
    rng = random.Random(seed)
    model = MODELS[name]()
    ttft_err: list[float] = []
    tpot_err: list[float] = []
    predict_s = learn_s = 0.0
    for i in range(samples):
        server = rng.randrange(len(SPEEDS))
        endpoint = f"10.0.0.{server}:8000"
        f = _request(rng)
        ttft, tpot = _truth(rng, SPEEDS[server], f)
        t0 = time.process_time()
        predicted = model.predict(endpoint, f)
        t1 = time.process_time()
        model.observe(endpoint, f, ttft, tpot)
        if (i + 1) % refit_every == 0:
            model.refit()
        learn_s += time.process_time() - t1
        predict_s += t1 - t0
        if i >= warmup and predicted is not None:
            ttft_err.append(abs(predicted[0] - ttft) / ttft)
            tpot_err.append(abs(predicted[1] - tpot) / tpot)
    ttft_err.sort()
    tpot_err.sort()
    return Result(
        name,
        ttft_err[len(ttft_err) // 2] if ttft_err else math.nan,
        tpot_err[len(tpot_err) // 2] if tpot_err else math.nan,
        predict_s / samples * 1e6,
        learn_s / samples * 1e6,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter,
        prog="epp-bench latency-model",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--samples", type=int, default=6000, help="simulated requests observed")
    parser.add_argument("--warmup", type=int, default=1000, help="samples before predictions are scored")
    parser.add_argument("--refit-every", type=int, default=16, help="samples between two refits of the model")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--quick", action="store_true", help="2000 samples, 500 warm-up")
    parser.add_argument(
        "--cpu-endpoints",
        type=int,
        default=16,
        help="pool size of the added-CPU measurement (bench.latency_cpu; 0: skip it)",
    )
    args = parser.parse_args(argv)
    samples, warmup = (2000, 500) if args.quick else (args.samples, args.warmup)
    print(f"{'model':<20} {'TTFT MdAPE':>10} {'TPOT MdAPE':>10} {'predict us':>10} {'learn us':>10}")
    for name in MODELS:
        r = evaluate(name, samples, warmup, args.refit_every, args.seed)
        print(
            f"{r.model:<20} {r.ttft_mape:>10.1%} {r.tpot_mape:>10.1%} "
            f"{r.predict_us:>10.1f} {r.learn_us:>10.1f}"
        )
    print(
        f"({samples} samples, first {warmup} not scored, refit every {args.refit_every}; MdAPE target <= 20%)"
    )
    if args.cpu_endpoints > 0:
        requests, warm = (1000, 300) if args.quick else (3000, 500)
        cpu = measure_added_cpu(args.cpu_endpoints, requests, warm, args.seed)
        verdict = "PASS" if cpu.added_us <= TARGET_US and cpu.model_ready else "MISS"
        print(
            f"picker CPU per request at {cpu.endpoints} endpoints ({cpu.requests} requests, scheduling and "
            f"lifecycle hooks, trainer included): default profile {cpu.default_us:.0f} us, predicted-latency "
            f"profile {cpu.predicted_us:.0f} us"
            + ("" if cpu.model_ready else " (the model never became ready)")
        )
        print(f"{verdict}  added picker CPU {cpu.added_us:.0f} us per request (target <= {TARGET_US:g} us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
