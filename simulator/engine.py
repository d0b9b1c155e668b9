"""The engine of one simulated vLLM server: admission, queueing, KV cache, LoRA and latency (sans-I/O).

The engine never sleeps or reads a clock: every method takes ``now`` (simulated seconds) and the
caller (:mod:`simulator.driver`) does the waiting. Lifecycle of a sequence::

    submit() -> WAITING --schedule()--> RUNNING --finish()/abort()--> FINISHED
                  \\--abort()--> FINISHED

* :meth:`Engine.submit` rejects with :class:`QueueFull` when ``max_waiting_queue_length`` requests
  already wait, and with :class:`RequestTooLarge` when the request can never fit (prompt + output over
  ``max_model_len`` or more blocks than the cache has).
* :meth:`Engine.schedule` walks the FIFO queue: it stops when ``max_num_seqs`` run or when the head
  cannot get KV blocks (the request waits for memory); it *skips* requests whose LoRA adapter cannot
  get a slot, so later requests for resident adapters run (LoRA-aware skipping).
* On admission: cached tokens = prefix-hit blocks x block size; the sequence starts at
  ``max(now, adapter ready time)``; first token at ``start + TTFT`` (see :mod:`simulator.latency`).
  With ``prefill_slots = N > 0`` at most N prefills run at once: the start also waits for the earliest
  slot to free (a GPU prefilling one long prompt at a time is ``N = 1``); 0 means unlimited.
* Every ``submit`` has exactly one ``finish`` or ``abort``; both free the sequence's resources.
"""

from __future__ import annotations

import enum
import heapq
import os
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from simulator.config import SimConfig
from simulator.kv_cache import KVCache, VllmBlockHasher, block_hashes
from simulator.latency import LatencyModel
from simulator.lora import LoraSlots
from simulator.stats import EngineStats

__all__ = ["Engine", "EngineError", "QueueFull", "RequestTooLarge", "Seq", "SeqState"]


class EngineError(Exception):
    """A request the engine refuses; ``status`` is the HTTP status to answer with."""

    status = 400
    error_type = "BadRequestError"


class QueueFull(EngineError):
    status = 429
    error_type = "RateLimitError"


class RequestTooLarge(EngineError):
    status = 400
    error_type = "BadRequestError"


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Seq:
    """One request inside the engine (mutable; owned by the engine, read by the driver)."""

    request_id: str
    prompt_tokens: int
    output_tokens: int
    lora: str | None
    hashes: list[int]
    extra_blocks: int
    arrival: float
    state: SeqState = SeqState.WAITING
    admitted_at: float = 0.0
    start_at: float = 0.0
    first_token_at: float = 0.0
    cached_tokens: int = 0
    ttft: float = 0.0
    prompt_ids: Sequence[int] = field(default=(), repr=False)  # kept for KV events
    on_admit: Callable[[Seq], None] | None = field(default=None, repr=False)


class Engine:
    """State of one server's engine. Not thread-safe; use from one event loop."""

    def __init__(
        self,
        config: SimConfig,
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        record_kv_events: bool = False,
    ) -> None:
        self.config = config
        self._rng = rng if rng is not None else random.Random(config.seed)
        self._wall = wall_clock
        self.latency = LatencyModel(config, self._rng)
        self.kv = KVCache(config.kv_cache_size, config.block_size, record_events=record_kv_events)
        algo = config.prefix_caching_hash_algo or ("sha256" if record_kv_events else "builtin")
        self._hash: Callable[[Sequence[int], int, str | None], list[int]] = (
            block_hashes
            if algo == "builtin"
            else VllmBlockHasher(algo, os.environ.get("PYTHONHASHSEED", ""), config.block_size)
        )
        self.lora = LoraSlots(
            config.max_loras, config.lora_load_time, {m.name: m.path for m in config.lora_modules}
        )
        self.stats = EngineStats()
        self.waiting: deque[Seq] = deque()
        self.running: set[Seq] = set()
        self.waiting_lora: dict[str, int] = {}
        self.lora_info_updated = self._wall()
        self._prefill_free: list[float] = [0.0] * config.prefill_slots  # heap of slot free times

    # -- queries ------------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def load_factor(self) -> float:
        return self.latency.load_factor(len(self.running))

    def output_length(self, max_tokens: int, ignore_eos: bool) -> int:
        """Exactly ``max_tokens`` with ``ignore_eos``, else a seeded uniform draw in [1, max_tokens]."""
        if ignore_eos or max_tokens <= 1:
            return max(max_tokens, 0)
        return self._rng.randint(1, max_tokens)

    # -- lifecycle ----------------------------------------------------------------------------------
    def submit(
        self,
        request_id: str,
        prompt_ids: Sequence[int],
        output_tokens: int,
        now: float,
        lora: str | None = None,
    ) -> Seq:
        """Queue a request; raise :class:`QueueFull` or :class:`RequestTooLarge`."""
        c = self.config
        prompt_tokens = len(prompt_ids)
        if prompt_tokens + output_tokens > c.effective_max_model_len:
            raise RequestTooLarge(
                f"This model's maximum context length is {c.effective_max_model_len} tokens. However, you "
                f"requested {prompt_tokens + output_tokens} tokens ({prompt_tokens} in the messages, "
                f"{output_tokens} in the completion). Please reduce the length of the messages or completion."
            )
        hashes = self._hash(prompt_ids, c.block_size, lora)
        total_blocks = -(-(prompt_tokens + output_tokens) // c.block_size)
        if total_blocks > c.kv_cache_size:
            raise RequestTooLarge(
                f"request needs {total_blocks} KV blocks but the cache has {c.kv_cache_size}"
            )
        if len(self.waiting) >= c.max_waiting_queue_length:
            raise QueueFull(f"waiting queue is full ({c.max_waiting_queue_length} requests)")
        seq = Seq(request_id, prompt_tokens, output_tokens, lora, hashes, total_blocks - len(hashes), now)
        if self.kv.events is not None:
            seq.prompt_ids = prompt_ids
        self.waiting.append(seq)
        if lora is not None:
            self.waiting_lora[lora] = self.waiting_lora.get(lora, 0) + 1
            self.lora_info_updated = self._wall()
        return seq

    def schedule(self, now: float) -> list[Seq]:
        """Admit waiting requests that can run now, in FIFO order; return them."""
        max_seqs = self.config.max_num_seqs
        if not self.waiting or len(self.running) >= max_seqs:
            return []
        admitted: list[Seq] = []
        keep: deque[Seq] = deque()
        memory_blocked = False
        for seq in self.waiting:
            if memory_blocked or len(self.running) >= max_seqs:
                keep.append(seq)
                continue
            if seq.lora is not None and not self.lora.can_acquire(seq.lora):
                keep.append(seq)  # LoRA-aware skipping: let later requests pass
                continue
            hits = self.kv.allocate(seq.hashes, seq.extra_blocks, seq.prompt_ids, seq.lora)
            if hits is None:
                memory_blocked = True
                keep.append(seq)
                continue
            self._admit(seq, hits, now)
            admitted.append(seq)
        self.waiting = keep
        return admitted

    def _admit(self, seq: Seq, hits: int, now: float) -> None:
        seq.state = SeqState.RUNNING
        self.running.add(seq)
        seq.admitted_at = now
        seq.cached_tokens = min(hits * self.config.block_size, seq.prompt_tokens)
        seq.start_at = now
        if seq.lora is not None:
            seq.start_at = max(now, self.lora.acquire(seq.lora, now))
            self._lora_waiting_done(seq.lora)
        prefill = self.latency.ttft(seq.prompt_tokens, seq.cached_tokens, len(self.running))
        if self._prefill_free:  # bounded prefill slots: wait for the earliest one to free up
            seq.start_at = max(seq.start_at, heapq.heappop(self._prefill_free))
            heapq.heappush(self._prefill_free, seq.start_at + prefill)
        seq.ttft = (seq.start_at - now) + prefill
        seq.first_token_at = now + seq.ttft
        st = self.stats
        st.prompt_tokens += seq.prompt_tokens
        st.prefix_cache_queries += seq.prompt_tokens
        st.prefix_cache_hits += seq.cached_tokens
        st.queue_time.observe(now - seq.arrival)
        if seq.on_admit is not None:
            seq.on_admit(seq)

    def _lora_waiting_done(self, lora: str) -> None:
        left = self.waiting_lora[lora] - 1
        if left:
            self.waiting_lora[lora] = left
        else:
            del self.waiting_lora[lora]
        self.lora_info_updated = self._wall()

    def inter_token(self) -> float:
        """The next decode gap (simulated seconds) under the current load; observed in the ITL histogram."""
        gap = self.latency.inter_token(len(self.running))
        self.stats.itl.observe(gap)
        return gap

    def finish(self, seq: Seq, now: float, finish_reason: str, generated: int) -> None:
        """A running request completed with ``generated`` tokens; record it and free its resources."""
        if seq.state is not SeqState.RUNNING:
            raise RuntimeError(f"finish() of a {seq.state.value} sequence {seq.request_id}")
        st = self.stats
        st.success[finish_reason] = st.success.get(finish_reason, 0) + 1
        st.generation_tokens += generated
        if generated > 0 or seq.output_tokens == 0:
            st.ttft.observe(seq.first_token_at - seq.arrival)  # vLLM: from arrival, queueing included
        st.e2e.observe(now - seq.arrival)
        self._release(seq, now)

    def abort(self, seq: Seq, now: float, generated: int = 0) -> None:
        """The client went away (or the server crashed): free whatever the sequence holds. Idempotent."""
        if seq.state is not SeqState.FINISHED:
            self.stats.success["abort"] += 1
        if seq.state is SeqState.WAITING:
            self.waiting.remove(seq)
            seq.state = SeqState.FINISHED
            if seq.lora is not None:
                self._lora_waiting_done(seq.lora)
        elif seq.state is SeqState.RUNNING:
            self.stats.generation_tokens += generated
            self._release(seq, now)

    def _release(self, seq: Seq, now: float) -> None:
        seq.state = SeqState.FINISHED
        self.running.discard(seq)
        self.kv.release(seq.hashes, seq.extra_blocks)
        if seq.lora is not None:
            self.lora.release(seq.lora, now)
            self.lora_info_updated = self._wall()
