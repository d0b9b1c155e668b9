"""Seeded, deterministic benchmark workloads.

A workload is an ordered list of :class:`RequestSpec` (arrival time offset, API path, JSON body,
session and group ids). The same name, parameters and seed always give byte-identical requests, so
every router in a comparison sees exactly the same traffic.

Text is made of words drawn from a fixed synthetic vocabulary, so one word is one token for the
simulator's offline tokenizer and token counts are predictable (``words ≈ tokens``).

Workloads (see ``WORKLOADS``):

* ``shared-prefix``: G groups × P prompts; each prompt is the group's system prompt (S tokens) plus
  a unique question (Q tokens), O output tokens (a scaled-down llm-d shared-prefix benchmark).
* ``few-prefixes``: the same shape with 2-3 groups at a high rate (naive prefix routing hot-spots).
* ``no-sharing``: unique random prompts (prefix routing must not lose to load-only routing).
* ``half-shared``: half the requests are shared-prefix prompts (G groups), half unique prompts of the
  same length, shuffled together.
* ``multi-turn``: chat sessions; each turn resends the whole conversation plus a new user message.
* ``lora-mix``: requests for several LoRA adapters with Zipf-skewed popularity.
* ``large-prompts``: 100-250 KB prompts (the processor's own overhead on big bodies).

Arrival processes (:func:`arrival_times`): ``constant``, ``poisson``, ``bursts`` (Poisson with
periodic bursts at ``burst_factor`` × the base rate). ``concurrency`` mode ignores arrival times
and keeps N requests in flight.

The oracle hit rate (:func:`oracle_hit_rate`) is the prefix-cache hit rate of an infinite cache that
sees the requests in order: 1 − (tokens in never-seen prefix blocks / all prompt tokens), counted in
whole blocks of ``block_size`` tokens exactly as vLLM's prefix cache does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "WORKLOADS",
    "RequestSpec",
    "Workload",
    "WorkloadParams",
    "arrival_times",
    "build_workload",
    "oracle_hit_rate",
    "percentile",
    "words",
]

_SYLLABLES = (
    "ka", "lo", "mi", "ren", "sa", "to", "vu", "xe", "po", "dri", "fa", "gol", "hu", "ji", "ne", "qua",
    "ri", "sel", "tam", "ul", "vor", "wen", "yl", "zo", "bra", "cle", "dun", "el", "fir", "gra",
)  # fmt: skip


def _vocabulary(size: int = 4096) -> tuple[str, ...]:
    rng = random.Random(7)
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return tuple(sorted(words))


VOCAB = _vocabulary()


def words(rng: random.Random, n: int) -> str:
    """``n`` space-separated vocabulary words (n tokens for the simulator's tokenizer)."""
    return " ".join(rng.choices(VOCAB, k=n))


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload. ``at`` is the arrival offset in seconds from the start."""

    index: int
    at: float
    path: str
    body: dict[str, Any]
    group: str = ""
    session: str = ""
    prompt_text: str = ""  # the text whose tokens the server will prefix-cache
    headers: tuple[tuple[str, str], ...] = ()  # extra HTTP headers of this request (e.g. x-slo-ttft-ms)

    @property
    def model(self) -> str:
        return str(self.body["model"])


@dataclass(frozen=True, slots=True)
class WorkloadParams:
    """Parameters shared by all workloads; each workload reads the ones it needs."""

    model: str = "sim-model"
    groups: int = 16
    prompts_per_group: int = 8
    system_tokens: int = 1000
    question_tokens: int = 100
    output_tokens: int = 32
    sessions: int = 16
    turns: int = 4
    adapters: tuple[str, ...] = ("lora-a", "lora-b", "lora-c", "lora-d", "lora-e", "lora-f")
    zipf_s: float = 1.2
    large_min_bytes: int = 100_000
    large_max_bytes: int = 250_000
    requests: int = 128  # for no-sharing, lora-mix and large-prompts
    rate: float = 10.0  # requests per second (arrival processes)
    arrival: str = "poisson"  # constant | poisson | bursts
    burst_factor: float = 8.0
    burst_every_s: float = 5.0
    burst_len_s: float = 0.5
    stream: bool = True
    seed: int = 42


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    params: WorkloadParams
    requests: tuple[RequestSpec, ...]
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.requests[-1].at if self.requests else 0.0


def arrival_times(n: int, params: WorkloadParams, rng: random.Random) -> list[float]:
    """``n`` non-decreasing arrival offsets (seconds) for the configured process."""
    if params.rate <= 0:
        raise ValueError(f"rate must be > 0, got {params.rate}")
    if params.arrival == "constant":
        return [i / params.rate for i in range(n)]
    if params.arrival not in ("poisson", "bursts"):
        raise ValueError(f"arrival must be constant, poisson or bursts, got {params.arrival!r}")
    out: list[float] = []
    t = 0.0
    for _ in range(n):
        rate = params.rate
        if params.arrival == "bursts" and (t % params.burst_every_s) < params.burst_len_s:
            rate *= params.burst_factor
        t += rng.expovariate(rate)
        out.append(t)
    return out


def _body(p: WorkloadParams, field: str, value: object, model: str | None = None) -> dict[str, Any]:
    """A request body: ``field`` is ``prompt`` (completions) or ``messages`` (chat)."""
    body: dict[str, Any] = {
        "model": model or p.model,
        field: value,
        "max_tokens": p.output_tokens,
        "ignore_eos": True,
        "stream": p.stream,
    }
    if p.stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _completion_body(p: WorkloadParams, prompt: str, model: str | None = None) -> dict[str, Any]:
    return _body(p, "prompt", prompt, model)


def _chat_body(p: WorkloadParams, messages: list[dict[str, str]]) -> dict[str, Any]:
    return _body(p, "messages", messages)


def _shared_prefix(p: WorkloadParams, rng: random.Random) -> list[tuple[str, dict[str, Any], str, str, str]]:
    systems = [words(rng, p.system_tokens) for _ in range(p.groups)]
    items = []
    for g in range(p.groups):
        for _ in range(p.prompts_per_group):
            prompt = f"{systems[g]}\n\n{words(rng, p.question_tokens)}"
            items.append(("/v1/completions", _completion_body(p, prompt), f"g{g}", "", prompt))
    rng.shuffle(items)
    return items


def _no_sharing(p: WorkloadParams, rng: random.Random) -> list[tuple[str, dict[str, Any], str, str, str]]:
    items = []
    for i in range(p.requests):
        prompt = words(rng, p.system_tokens + p.question_tokens)
        items.append(("/v1/completions", _completion_body(p, prompt), f"r{i}", "", prompt))
    return items


def _half_shared(p: WorkloadParams, rng: random.Random) -> list[tuple[str, dict[str, Any], str, str, str]]:
    shared = _shared_prefix(p, rng)
    unique = []
    for i in range(len(shared)):
        prompt = words(rng, p.system_tokens + p.question_tokens)
        unique.append(("/v1/completions", _completion_body(p, prompt), f"u{i}", "", prompt))
    items = shared + unique
    rng.shuffle(items)
    return items


def _multi_turn(p: WorkloadParams, rng: random.Random) -> list[tuple[str, dict[str, Any], str, str, str]]:
    # Interleave sessions: turn t of every session comes before turn t+1 of any session.
    convs: list[list[dict[str, str]]] = [
        [{"role": "system", "content": words(rng, p.system_tokens // 2)}] for _ in range(p.sessions)
    ]
    items = []
    for _turn in range(p.turns):
        order = list(range(p.sessions))
        rng.shuffle(order)
        for s in order:
            convs[s].append({"role": "user", "content": words(rng, p.question_tokens)})
            messages = [dict(m) for m in convs[s]]
            text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
            items.append(("/v1/chat/completions", _chat_body(p, messages), f"s{s}", f"s{s}", text))
            convs[s].append({"role": "assistant", "content": words(rng, p.output_tokens)})
    return items


def _lora_mix(p: WorkloadParams, rng: random.Random) -> list[tuple[str, dict[str, Any], str, str, str]]:
    weights = [1.0 / (k + 1) ** p.zipf_s for k in range(len(p.adapters))]
    systems = {a: words(rng, p.system_tokens // 2) for a in p.adapters}
    items = []
    for _ in range(p.requests):
        adapter = rng.choices(p.adapters, weights=weights)[0]
        prompt = f"{systems[adapter]}\n\n{words(rng, p.question_tokens)}"
        items.append(("/v1/completions", _completion_body(p, prompt, model=adapter), adapter, "", prompt))
    return items


def _large_prompts(p: WorkloadParams, rng: random.Random) -> list[tuple[str, dict[str, Any], str, str, str]]:
    items = []
    avg_word = sum(len(w) for w in VOCAB) / len(VOCAB) + 1
    for i in range(p.requests):
        size = rng.randint(p.large_min_bytes, p.large_max_bytes)
        prompt = words(rng, max(1, int(size / avg_word)))
        items.append(("/v1/completions", _completion_body(p, prompt), f"r{i}", "", prompt))
    return items


_Builder = Callable[[WorkloadParams, random.Random], list[tuple[str, dict[str, Any], str, str, str]]]

WORKLOADS: dict[str, _Builder] = {
    "shared-prefix": _shared_prefix,
    "few-prefixes": _shared_prefix,
    "no-sharing": _no_sharing,
    "half-shared": _half_shared,
    "multi-turn": _multi_turn,
    "lora-mix": _lora_mix,
    "large-prompts": _large_prompts,
}


def build_workload(name: str, params: WorkloadParams | None = None) -> Workload:
    """Build the named workload deterministically from ``params`` (and its seed)."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; expected one of {', '.join(sorted(WORKLOADS))}")
    p = params or WorkloadParams()
    if name == "few-prefixes" and p.groups > 3:
        p = replace(p, groups=3, prompts_per_group=max(p.prompts_per_group, 32))
    rng = random.Random(p.seed)
    items = WORKLOADS[name](p, rng)
    times = arrival_times(len(items), p, random.Random(p.seed + 1))
    reqs = tuple(
        RequestSpec(index=i, at=t, path=path, body=body, group=group, session=session, prompt_text=text)
        for i, (t, (path, body, group, session, text)) in enumerate(zip(times, items, strict=True))
    )
    return Workload(name=name, params=p, requests=reqs)


def oracle_hit_rate(
    prompts: Sequence[Sequence[int]], block_size: int = 16, salt: Callable[[int], object] | None = None
) -> float:
    """Infinite-cache prefix hit rate over token-id sequences, in whole blocks (vLLM semantics).

    A block hits when the same block, with the same whole prefix before it, appeared earlier. Only
    full blocks are cacheable. ``salt(i)`` may distinguish requests whose caches never mix (e.g. the
    LoRA adapter of request ``i``).
    """
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    seen: set[int] = set()
    total = 0
    hit = 0
    for i, tokens in enumerate(prompts):
        total += len(tokens)
        parent = hash(salt(i)) if salt else 0
        full = len(tokens) // block_size
        for b in range(full):
            h = hash((parent, tuple(tokens[b * block_size : (b + 1) * block_size])))
            if h in seen:
                hit += block_size
            else:
                seen.add(h)
            parent = h
    return hit / total if total else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); NaN for no values."""
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]
