"""Scheduler benchmark: decision latency with the default profile, and the prefix index's cost.

Usage: ``epp-bench scheduler [--quick] [--endpoints 16,64,256] [--prompts 2048,8192,65536]
[--json FILE] [--strict]``.

Decision latency: for each pool size and prompt size, a scheduler built from the default configuration
(queue x2, kv-cache x2, prefix x3, max-score-picker) routes a seeded shared-prefix workload: 32 groups,
each prompt = its group's system prompt (half the prompt) + a unique question, so prompts share
prefixes with earlier ones. The index is warmed first (``schedule`` + ``dispatched`` for every warm-up
request), then each ``schedule()`` call is timed (``perf_counter``; GC enabled, as in the server), and
separately each ``dispatched()`` (the index update). Reported: p50/p99 of both, the p99 of the
thread CPU time of ``schedule()`` (wall-clock p99 on a shared machine includes preemption by other
processes; the CPU p99 does not), and the mean prefix score of the chosen endpoint (the routing is
doing its job when it is high).

Prefix index: memory per (endpoint, block) entry at full capacity (16 endpoints x 31,250 blocks),
measured with tracemalloc (the index's dicts, deques and the hash ints it keeps alive); insert cost
per block at capacity (with eviction); lookup cost for a 128-block prompt; hash-chain cost for an 8k
prompt. Targets are checked at the end (PASS/MISS).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from epp.config.flags import ManualHelpFormatter
from scheduler.config import default_config
from scheduler.plugins.prefix.hashing import chain_seed, prefix_hashes
from scheduler.plugins.prefix.index import PrefixIndex
from scheduler.types import Endpoint, LLMRequest, Metrics

__all__ = ["DecisionRow", "IndexFigures", "main", "measure_decisions", "measure_index"]

GROUPS = 32
ALPHABET = "abcdefghijklmnopqrstuvwxyz     ,.0123456789"


@dataclass(frozen=True, slots=True)
class DecisionRow:
    endpoints: int
    prompt_chars: int
    requests: int
    p50_ms: float
    p99_ms: float
    cpu_p99_ms: float
    dispatched_p50_ms: float
    dispatched_p99_ms: float
    picked_prefix_score: float


@dataclass(frozen=True, slots=True)
class IndexFigures:
    endpoints: int
    capacity: int
    entries: int
    bytes_per_entry: float
    insert_us_per_block: float
    lookup_us_per_128_blocks: float
    hash_us_per_8k_prompt: float


def _pct(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _text(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(ALPHABET, k=n))


def _pool(n: int, rng: random.Random) -> list[Endpoint]:
    return [
        Endpoint(
            f"10.{i // 250}.{i % 250}.1:8000",
            name=f"vllm-{i}",
            metrics=Metrics(
                waiting_queue_size=rng.randint(0, 8),
                running_requests=rng.randint(0, 32),
                kv_cache_usage=rng.random() * 0.9,
                updated_at=1.0,
            ),
        )
        for i in range(n)
    ]


def measure_decisions(
    endpoints: int, prompt_chars: int, warm: int, measured: int, seed: int = 1
) -> DecisionRow:
    rng = random.Random(seed)
    scheduler = default_config(seed=seed).build_scheduler()
    pool = _pool(endpoints, rng)
    systems = [_text(rng, prompt_chars // 2) for _ in range(GROUPS)]
    question = prompt_chars - prompt_chars // 2

    def request(rid: str) -> LLMRequest:
        text = rng.choice(systems) + _text(rng, question)
        return LLMRequest(rid, "llama", "llama", prompt_text=text, token_estimate=len(text) // 4)

    for i in range(warm):
        req = request(f"w{i}")
        scheduler.dispatched(req, scheduler.schedule(req, pool))
    requests = [request(f"r{i}") for i in range(measured)]
    decide: list[float] = []
    cpu: list[float] = []
    update: list[float] = []
    score = 0.0
    clock = time.perf_counter
    cpu_clock = time.thread_time
    for req in requests:
        c0 = cpu_clock()
        t0 = clock()
        result = scheduler.schedule(req, pool)
        t1 = clock()
        cpu.append(cpu_clock() - c0)
        scheduler.dispatched(req, result)
        t2 = clock()
        decide.append(t1 - t0)
        update.append(t2 - t1)
        if result.decision is not None:
            profile = result.decision.profiles[0]
            index = profile.candidates.index(result.primary.address)
            score += profile.scores["prefix-cache-scorer"][index]
    decide.sort()
    update.sort()
    cpu.sort()
    return DecisionRow(
        endpoints,
        prompt_chars,
        measured,
        _pct(decide, 0.50) * 1e3,
        _pct(decide, 0.99) * 1e3,
        _pct(cpu, 0.99) * 1e3,
        _pct(update, 0.50) * 1e3,
        _pct(update, 0.99) * 1e3,
        score / measured,
    )


def measure_index(endpoints: int = 16, capacity: int = 31_250, seed: int = 2) -> IndexFigures:
    rng = random.Random(seed)
    blocks_per_request = 128
    gc.collect()
    tracemalloc.start()
    index = PrefixIndex(capacity)
    before = tracemalloc.get_traced_memory()[0]
    for e in range(endpoints):
        address = f"10.0.{e}.1:8000"
        for _ in range(capacity // blocks_per_request + 1):
            index.insert(address, [rng.getrandbits(64) for _ in range(blocks_per_request)])
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    entries = index.total_entries()

    chains = [[rng.getrandbits(64) for _ in range(blocks_per_request)] for _ in range(200)]
    t0 = time.perf_counter()
    for i, chain in enumerate(chains):
        index.insert(f"10.0.{i % endpoints}.1:8000", chain)
    insert_us = (time.perf_counter() - t0) / (len(chains) * blocks_per_request) * 1e6

    probe = chains[-1]
    for e in range(endpoints):  # endpoints holding prefixes of different lengths
        index.insert(f"10.0.{e}.1:8000", probe[: (e + 1) * blocks_per_request // endpoints])
    lookups = 2000
    t0 = time.perf_counter()
    for _ in range(lookups):
        index.match(probe)
    lookup_us = (time.perf_counter() - t0) / lookups * 1e6

    text = _text(rng, 8192)
    seed_hash = chain_seed("llama", "")
    t0 = time.perf_counter()
    for _ in range(lookups):
        prefix_hashes(text, seed_hash, 64, 256)
    hash_us = (time.perf_counter() - t0) / lookups * 1e6
    return IndexFigures(endpoints, capacity, entries, used / entries, insert_us, lookup_us, hash_us)


@dataclass(frozen=True, slots=True)
class Target:
    label: str
    value: float
    limit: float
    unit: str

    @property
    def met(self) -> bool:
        return self.value <= self.limit


def _targets(rows: Sequence[DecisionRow], index: IndexFigures) -> list[Target]:
    out: list[Target] = []
    find: Callable[[int, int], DecisionRow | None] = lambda n, p: next(  # noqa: E731
        (r for r in rows if r.endpoints == n and r.prompt_chars == p), None
    )
    at16 = find(16, 8192)
    if at16 is not None:
        out.append(Target("decision p50, 16 endpoints, 8k prompt", at16.p50_ms, 0.3, "ms"))
        out.append(Target("decision p99, 16 endpoints, 8k prompt", at16.p99_ms, 1.0, "ms"))
        out.append(
            Target("decision p99 (thread CPU time), 16 endpoints, 8k prompt", at16.cpu_p99_ms, 1.0, "ms")
        )
    at256 = [r for r in rows if r.endpoints == 256]
    if at256:
        worst = max(at256, key=lambda r: r.p50_ms)
        label = f"decision p50, 256 endpoints (worst prompt size: {worst.prompt_chars // 1024}k)"
        out.append(Target(label, worst.p50_ms, 2.0, "ms"))
    out.append(Target("prefix index bytes per (endpoint, block) entry", index.bytes_per_entry, 150.0, "B"))
    return out


def _print(rows: Sequence[DecisionRow], index: IndexFigures, targets: Sequence[Target]) -> None:
    print(f"python {platform.python_version()} on {platform.machine()}, gc enabled")
    print()
    print(
        "| endpoints | prompt | decisions | schedule p50 | schedule p99 | schedule p99 CPU "
        "| dispatched p50 | dispatched p99 | picked prefix score |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.endpoints} | {r.prompt_chars // 1024}k | {r.requests} "
            f"| {r.p50_ms:.3f} ms | {r.p99_ms:.3f} ms | {r.cpu_p99_ms:.3f} ms "
            f"| {r.dispatched_p50_ms:.3f} ms | {r.dispatched_p99_ms:.3f} ms | {r.picked_prefix_score:.2f} |"
        )
    print()
    print(
        f"prefix index at full capacity ({index.endpoints} endpoints x {index.capacity:,} blocks = "
        f"{index.entries:,} entries): {index.bytes_per_entry:.1f} bytes/entry "
        f"({index.bytes_per_entry * index.entries / 2**20:.1f} MiB)"
    )
    print(
        f"insert at capacity: {index.insert_us_per_block:.2f} us/block; lookup of 128 blocks: "
        f"{index.lookup_us_per_128_blocks:.1f} us; "
        f"hash chain of an 8k prompt: {index.hash_us_per_8k_prompt:.1f} us"
    )
    print()
    for t in targets:
        verdict = "PASS" if t.met else "MISS"
        print(f"{verdict}  {t.label}: {t.value:.3f} {t.unit} (target <= {t.limit:g} {t.unit})")


def _sizes(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter, prog="epp-bench scheduler", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests per cell (smoke run)")
    parser.add_argument("--endpoints", type=_sizes, default=[16, 64, 256], help="pool sizes, comma-separated")
    parser.add_argument(
        "--prompts",
        type=_sizes,
        default=[2048, 8192, 65536],
        help="prompt sizes in characters, comma-separated",
    )
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    warm, measured = (100, 300) if args.quick else (500, 2000)
    rows = []
    for n in args.endpoints:
        for p in args.prompts:
            print(f"measuring {n} endpoints, {p}-char prompts ...", file=sys.stderr, flush=True)
            rows.append(measure_decisions(n, p, warm, measured))
    print("measuring the prefix index at full capacity ...", file=sys.stderr, flush=True)
    index = measure_index()
    targets = _targets(rows, index)
    _print(rows, index, targets)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            payload = {
                "decisions": [asdict(r) for r in rows],
                "index": asdict(index),
                "targets": [{**asdict(t), "met": t.met} for t in targets],
            }
            json.dump(payload, f, indent=2)
    return 1 if args.strict and not all(t.met for t in targets) else 0


if __name__ == "__main__":
    raise SystemExit(main())
