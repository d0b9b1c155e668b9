"""Every decision of a scheduler on a seeded workload, for A/B checks of changes meant to keep routing
identical (not a test): run it on two checkouts and compare the outputs.

    .venv/bin/python tests/scheduler/decision_trace.py /tmp/new.txt 3000
    (cd /tmp && PYTHONPATH=/path/to/old/checkout /path/to/.venv/bin/python \\
        /path/to/tests/scheduler/decision_trace.py /tmp/old.txt 3000)
    cmp /tmp/old.txt /tmp/new.txt

The workload (per configuration and seed 1, 2, 3): 16 endpoints with random queue / KV metrics per
request; prompts from 40 groups of shared prefixes (200 to 3000 characters) plus a unique tail, a
quarter of them cold; the requests in flight swing between 0 and ~400 (completions interleaved, 2%
never completed so they expire, 5% served by another endpoint, 1% completed twice); endpoints
occasionally removed and re-added. Each line holds the routed endpoints, the headers and the whole
decision record (candidates, every scorer's scores, totals, picks). Arguments after the request
count are configuration files (default: the built-in default profile). Configurations whose plugins
read the wall clock (the predicted-latency ones) are not reproducible run to run.
"""

from __future__ import annotations

import hashlib
import math
import random
import sys
from typing import TextIO

from scheduler.config import default_config
from scheduler.config.loader import load_config_text
from scheduler.errors import NoEndpointError
from scheduler.headers import SERVED_ENDPOINT_HEADER
from scheduler.types import Completion, Endpoint, LLMRequest, Metrics, Outcome, SchedulingResult

ALPHABET = "abcdefghijklmnopqrstuvwxyz     ,.0123456789"


def trace(config: str, seed: int, requests: int, out: TextIO) -> str:
    """Write one line per request; return the SHA-256 of the lines."""
    now = [1000.0]

    def clock() -> float:
        return now[0]

    if config == "default":
        resolved = default_config(seed=seed, clock=clock)
    else:
        with open(config) as f:
            resolved = load_config_text(f.read(), source=config, seed=seed, clock=clock)
    scheduler = resolved.build_scheduler()
    rng = random.Random(seed)
    addresses = [f"10.0.0.{i}:8000" for i in range(16)]
    groups = ["".join(rng.choices(ALPHABET, k=rng.choice([200, 700, 1500, 3000]))) for _ in range(40)]
    live = list(addresses)
    inflight: list[tuple[LLMRequest, SchedulingResult]] = []
    digest = hashlib.sha256()
    for i in range(requests):
        now[0] += rng.choice([0.001, 0.01, 0.05, 0.3])
        if rng.random() < 0.002 and len(live) > 4:
            gone = rng.sample(live, 2)
            live = [a for a in live if a not in gone]
            scheduler.endpoints_removed(frozenset(gone))
        elif rng.random() < 0.004 and len(live) < 16:
            live = [a for a in addresses if a in live or rng.random() < 0.5]
        pool = [
            Endpoint(a, name=a, metrics=Metrics(
                updated_at=now[0], waiting_queue_size=rng.randint(0, 6), running_requests=rng.randint(0, 20),
                kv_cache_usage=rng.choice([rng.random(), 0.0, 1.0, 0.5])))
            for a in live
        ]  # fmt: skip
        r = rng.random()
        if r < 0.25:
            text = "".join(rng.choices(ALPHABET, k=rng.randint(0, 2000)))  # cold
        else:
            tail = "".join(rng.choices(ALPHABET, k=rng.randint(0, 400)))
            text = rng.choice(groups[: 8 if r < 0.6 else 40]) + tail
        request = LLMRequest(f"r{i}", "llama", "llama", prompt_text=text, token_estimate=len(text) // 4)
        try:
            result = scheduler.schedule(request, pool)
        except NoEndpointError as exc:
            line = f"{i} no endpoint: {exc.reason}"
        else:
            decision = result.decision
            profiles = [
                (p.profile, p.candidates, sorted(p.scores.items()), p.totals, p.picked, p.failure)
                for p in (decision.profiles if decision is not None else ())
            ]
            line = f"{i} {[e.address for e in result.endpoints]} {dict(result.headers)!r} {profiles!r}"
            scheduler.dispatched(request, result)
            inflight.append((request, result))
        digest.update(line.encode())
        out.write(line + "\n")
        target = int(200 + 200 * math.sin(i / 500.0))
        while len(inflight) > target or (inflight and rng.random() < 0.3):
            done, done_result = inflight.pop(rng.randrange(len(inflight)) if rng.random() < 0.5 else 0)
            if rng.random() < 0.02:
                continue  # never completes: expires after the plugins' request timeout
            headers = {SERVED_ENDPOINT_HEADER: rng.choice(addresses)} if rng.random() < 0.05 else {}
            scheduler.response_headers(done, done_result, 200, headers)
            scheduler.completed(done, done_result, Completion(Outcome.OK, 200))
            if rng.random() < 0.01:
                scheduler.completed(done, done_result, Completion(Outcome.OK, 200))  # reported twice
    return digest.hexdigest()


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: decision_trace.py OUTPUT REQUESTS [CONFIG_FILE ...]")
    configs = argv[2:] or ["default"]
    import scheduler

    print(f"scheduler from {scheduler.__file__}")
    with open(argv[0], "w") as out:
        for config in configs:
            for seed in (1, 2, 3):
                out.write(f"== {config} seed {seed}\n")
                print(config, seed, trace(config, seed, int(argv[1]), out))


if __name__ == "__main__":
    main(sys.argv[1:])
