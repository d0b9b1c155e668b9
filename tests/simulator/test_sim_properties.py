"""Property tests: random request lifecycles keep the engine's and the cache's invariants."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import LoraModule, SimConfig
from simulator.engine import Engine, Seq, SeqState
from simulator.kv_cache import KVCache, block_hashes

BS = 4

# an operation: (kind, prompt family, prompt length, output length, adapter)
ops = st.lists(
    st.tuples(
        st.sampled_from(["submit", "submit", "finish", "abort"]),
        st.integers(0, 3),
        st.integers(1, 40),
        st.integers(1, 12),
        st.sampled_from([None, None, "a", "b"]),
    ),
    max_size=60,
)


def check_cache(kv: KVCache, running: list[Seq]) -> None:
    refs = kv._refs
    expected: dict[int, int] = {}
    for seq in running:
        for bh in seq.hashes:
            expected[bh] = expected.get(bh, 0) + 1
    assert {h: c for h, c in refs.items() if c} == expected
    assert set(kv._evictable) == {h for h, c in refs.items() if c == 0}
    assert kv.used_blocks == len(expected) + sum(s.extra_blocks for s in running)
    assert 0 <= kv.used_blocks <= kv.total
    assert kv.cached_blocks + kv._anon <= kv.total


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(0, 2**16))
def test_random_lifecycles_keep_invariants(
    operations: list[tuple[str, int, int, int, str | None]], seed: int
) -> None:
    cfg = SimConfig(block_size=BS, kv_cache_size=24, max_num_seqs=3, max_waiting_queue_length=8, max_loras=1,
                    lora_modules=(LoraModule("a"), LoraModule("b")))  # fmt: skip
    eng = Engine(cfg, random.Random(seed), wall_clock=lambda: 0.0)
    pick = random.Random(seed)
    now = 0.0
    admitted_order: list[Seq] = []
    submitted: list[Seq] = []
    for i, (kind, family, length, out, lora) in enumerate(operations):
        now += 0.01
        if kind == "submit":
            prompt = [family * 1000 + t for t in range(length)]
            try:
                seq = eng.submit(str(i), prompt, out, now, lora)
            except Exception as exc:  # only the documented refusals
                assert type(exc).__name__ in ("QueueFull", "RequestTooLarge")
                continue
            submitted.append(seq)
        elif eng.running and kind == "finish":
            seq = pick.choice(sorted(eng.running, key=lambda s: s.request_id))
            eng.finish(seq, now, "length", seq.output_tokens)
        elif kind == "abort" and submitted:
            eng.abort(pick.choice(submitted), now)
        admitted_order += eng.schedule(now)
        assert eng.num_running <= cfg.max_num_seqs
        assert eng.num_waiting <= cfg.max_waiting_queue_length
        assert len(eng.lora.resident()) <= cfg.max_loras
        assert all(s.state is SeqState.WAITING for s in eng.waiting)
        assert all(s.state is SeqState.RUNNING for s in eng.running)
        assert sum(eng.waiting_lora.values()) == sum(1 for s in eng.waiting if s.lora)
        check_cache(eng.kv, list(eng.running))
    for seq in list(eng.running):
        eng.finish(seq, now + 1, "length", seq.output_tokens)
    assert eng.kv.used_blocks == 0 and eng.kv.usage == 0.0
    base = [s for s in admitted_order if s.lora is None]
    assert base == sorted(base, key=lambda s: int(s.request_id))  # base-model requests never overtake


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**20), max_size=80), st.integers(1, 8))
def test_block_hashes_are_prefix_stable(ids: list[int], block_size: int) -> None:
    full = block_hashes(ids, block_size)
    assert len(full) == len(ids) // block_size
    for cut in range(0, len(ids) + 1, max(1, len(ids) // 5 or 1)):
        assert block_hashes(ids[:cut], block_size) == full[: cut // block_size]
