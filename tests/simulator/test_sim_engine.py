"""Engine rules driven directly with explicit times (no sockets, no sleeping)."""

from __future__ import annotations

import random

import pytest

from simulator.config import LoraModule, SimConfig
from simulator.engine import Engine, QueueFull, RequestTooLarge, SeqState
from simulator.kv_cache import KVCache, block_hashes
from simulator.latency import LatencyModel

BS = 4


def make_engine(**overrides: object) -> Engine:
    fields: dict[str, object] = {
        "block_size": BS,
        "kv_cache_size": 16,
        "max_num_seqs": 4,
        "prefill_overhead": 0.010,
        "prefill_time_per_token": 0.001,
        "inter_token_latency": 0.005,
    }
    fields.update(overrides)
    cfg = SimConfig(**fields)  # type: ignore[arg-type]
    return Engine(cfg, random.Random(0), wall_clock=lambda: 1000.0)


def ids(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


# -- KV cache ---------------------------------------------------------------------------------------


def test_repeated_prompt_is_a_cache_hit_with_block_granular_cached_tokens() -> None:
    eng = make_engine()
    prompt = ids(10)  # 2 full blocks + 2 tokens
    first = eng.submit("a", prompt, 1, now=0.0)
    assert eng.schedule(0.0) == [first]
    assert first.cached_tokens == 0
    eng.finish(first, 1.0, "length", 1)
    second = eng.submit("b", prompt, 1, now=2.0)
    eng.schedule(2.0)
    assert second.cached_tokens == 2 * BS
    assert eng.stats.prefix_cache_hits == 8
    assert eng.stats.prefix_cache_queries == 20


def test_prefix_match_stops_at_first_differing_block() -> None:
    eng = make_engine()
    a = eng.submit("a", ids(12), 1, now=0.0)
    eng.schedule(0.0)
    eng.finish(a, 0.1, "length", 1)
    changed = ids(12)
    changed[5] = 999  # second block differs -> only block 0 hits, block 2 chained after it misses too
    b = eng.submit("b", changed, 1, now=0.2)
    eng.schedule(0.2)
    assert b.cached_tokens == BS


def test_lora_adapter_roots_a_separate_hash_chain() -> None:
    assert block_hashes(ids(8), BS, None) != block_hashes(ids(8), BS, "sql-lora")
    assert block_hashes(ids(7), BS) == block_hashes(ids(4), BS)  # the partial block is not hashed
    assert len(block_hashes(ids(7), BS)) == 1


def test_prompt_larger_than_free_cache_waits_until_blocks_are_freed() -> None:
    eng = make_engine(kv_cache_size=10)
    big = eng.submit("big", ids(28), 4, now=0.0)  # 8 blocks
    eng.schedule(0.0)
    assert big.state is SeqState.RUNNING
    other = eng.submit("other", ids(12, start=500), 4, now=0.1)  # 4 blocks, only 2 free
    assert eng.schedule(0.1) == []
    assert other.state is SeqState.WAITING
    assert eng.kv.usage == pytest.approx(0.8)
    eng.finish(big, 0.5, "length", 4)
    assert eng.schedule(0.5) == [other]


def test_request_that_can_never_fit_is_rejected() -> None:
    eng = make_engine(kv_cache_size=4)
    with pytest.raises(RequestTooLarge):
        eng.submit("x", ids(17), 1, now=0.0)


def test_eviction_is_lru_over_unused_blocks_only() -> None:
    kv = KVCache(total_blocks=4, block_size=BS)
    a, b, c = block_hashes(ids(4), BS), block_hashes(ids(4, 100), BS), block_hashes(ids(4, 200), BS)
    assert kv.allocate(a, 0) == 0
    assert kv.allocate(b, 0) == 0
    assert kv.allocate(c, 0) == 0
    kv.release(a, 0)
    kv.release(b, 0)  # LRU order of evictable blocks: a, then b; c still in use
    assert kv.allocate(a, 0) == 1  # touching a makes b the least recently used
    kv.release(a, 0)
    assert kv.allocate([], 2) == 0  # needs 2 blocks: 1 never used + evict b (LRU)
    assert not kv.contains(b[0])
    assert kv.contains(a[0]) and kv.contains(c[0])
    assert kv.evictions == 1
    assert kv.allocate([], 2) is None  # c is referenced, a is the only evictable block
    assert kv.contains(a[0])


def test_usage_counts_referenced_blocks_only() -> None:
    kv = KVCache(total_blocks=8, block_size=BS)
    chain = block_hashes(ids(8), BS)
    kv.allocate(chain, 2)
    assert kv.usage == pytest.approx(4 / 8)
    kv.release(chain, 2)
    assert kv.usage == 0.0
    assert kv.cached_blocks == 2


# -- queue ------------------------------------------------------------------------------------------


def test_queue_is_fifo_and_bounded_by_max_num_seqs() -> None:
    eng = make_engine(max_num_seqs=2, max_waiting_queue_length=3)
    seqs = [eng.submit(f"r{i}", ids(4, 10 * i), 1, now=float(i)) for i in range(3)]
    assert eng.schedule(3.0) == seqs[:2]
    assert eng.num_waiting == 1
    eng.submit("r3", ids(4, 30), 1, now=3.0)
    eng.submit("r4", ids(4, 40), 1, now=3.0)
    with pytest.raises(QueueFull):
        eng.submit("r5", ids(4, 50), 1, now=3.0)
    eng.finish(seqs[1], 4.0, "length", 1)
    admitted = eng.schedule(4.0)
    assert [s.request_id for s in admitted] == ["r2"]
    assert admitted[0].admitted_at - admitted[0].arrival == pytest.approx(2.0)


def test_lora_aware_skipping_lets_later_requests_pass() -> None:
    eng = make_engine(max_loras=1, max_num_seqs=4, lora_modules=(LoraModule("a"), LoraModule("b")))
    first = eng.submit("1", ids(4), 2, now=0.0, lora="a")
    eng.schedule(0.0)
    blocked = eng.submit("2", ids(4, 10), 2, now=0.1, lora="b")  # slot busy with a running request
    same = eng.submit("3", ids(4, 20), 2, now=0.2, lora="a")
    base = eng.submit("4", ids(4, 30), 2, now=0.3)
    assert eng.schedule(0.3) == [same, base]
    assert blocked.state is SeqState.WAITING
    assert eng.waiting_lora == {"b": 1}
    assert sorted(eng.lora.running()) == ["a"]
    for seq in (first, same):
        eng.finish(seq, 1.0, "length", 2)
    assert eng.schedule(1.0) == [blocked]  # a is idle now and gets evicted for b
    assert eng.lora.resident() == ["b"]


def test_unloaded_adapter_costs_its_load_time() -> None:
    eng = make_engine(lora_load_time=0.5, lora_modules=(LoraModule("a"),))
    s1 = eng.submit("1", ids(4), 1, now=0.0, lora="a")
    eng.schedule(0.0)
    s2 = eng.submit("2", ids(4, 10), 1, now=0.2, lora="a")  # still loading: waits for the rest
    eng.schedule(0.2)
    assert s1.start_at == pytest.approx(0.5)
    assert s2.start_at == pytest.approx(0.5)
    eng.finish(s1, 1.0, "length", 1)
    eng.finish(s2, 1.0, "length", 1)
    s3 = eng.submit("3", ids(4, 20), 1, now=2.0, lora="a")  # resident now: no load
    eng.schedule(2.0)
    assert s3.start_at == 2.0
    assert eng.lora.loads == 1


def test_abort_frees_waiting_and_running_requests() -> None:
    eng = make_engine(max_num_seqs=1)
    run = eng.submit("run", ids(8), 1, now=0.0)
    eng.schedule(0.0)
    wait = eng.submit("wait", ids(8, 50), 1, now=0.0)
    eng.abort(wait, 0.1)
    assert eng.num_waiting == 0
    eng.abort(run, 0.1)
    eng.abort(run, 0.2)  # idempotent
    assert eng.num_running == 0
    assert eng.kv.usage == 0.0
    assert eng.stats.success["abort"] == 2


# -- latency ----------------------------------------------------------------------------------------


def test_ttft_drops_with_cached_tokens() -> None:
    eng = make_engine()
    prompt = ids(16)
    a = eng.submit("a", prompt, 1, now=0.0)
    eng.schedule(0.0)
    assert a.ttft == pytest.approx(0.010 + 16 * 0.001)
    eng.finish(a, 1.0, "length", 1)
    b = eng.submit("b", prompt, 1, now=1.0)
    eng.schedule(1.0)
    assert b.cached_tokens == 16
    assert b.ttft == pytest.approx(0.010)
    assert b.first_token_at == pytest.approx(1.010)


@pytest.mark.parametrize(
    ("running", "factor"),
    [(1, 1.0), (2, 1 + 1.0 / 3), (4, 2.0)],
)
def test_load_factor_is_linear_in_running_requests(running: int, factor: float) -> None:
    cfg = SimConfig(
        max_num_seqs=4, time_factor_under_load=2.0, inter_token_latency=0.01, prefill_overhead=0.1
    )
    model = LatencyModel(cfg, random.Random(0))
    assert model.load_factor(running) == pytest.approx(factor)
    assert model.inter_token(running) == pytest.approx(0.01 * factor)
    assert model.ttft(100, 0, running) == pytest.approx(0.1 * factor)


def test_load_factor_applies_to_admitted_requests() -> None:
    eng = make_engine(time_factor_under_load=3.0, max_num_seqs=3, prefill_time_per_token=0.0)
    seqs = [eng.submit(str(i), ids(4, 10 * i), 1, now=0.0) for i in range(3)]
    eng.schedule(0.0)
    assert [s.ttft for s in seqs] == pytest.approx([0.010, 0.020, 0.030])
    assert eng.inter_token() == pytest.approx(0.005 * 3.0)


def test_fixed_ttft_replaces_prefill_formula_and_jitter_is_seeded() -> None:
    cfg = SimConfig(
        time_to_first_token=0.2,
        time_to_first_token_std_dev=0.02,
        inter_token_latency=0.01,
        inter_token_latency_std_dev=0.002,
    )
    one, two = LatencyModel(cfg, random.Random(7)), LatencyModel(cfg, random.Random(7))
    draws = [one.ttft(1000, 0, 1) for _ in range(50)]
    assert draws == [two.ttft(1000, 0, 1) for _ in range(50)]
    assert all(0.14 <= d <= 0.26 for d in draws) and len(set(draws)) > 1
    gaps = [one.inter_token(1) for _ in range(200)]
    assert all(0.004 <= g <= 0.016 for g in gaps)


def test_output_length_rules() -> None:
    eng = make_engine()
    assert eng.output_length(7, ignore_eos=True) == 7
    draws = [eng.output_length(7, ignore_eos=False) for _ in range(200)]
    assert min(draws) >= 1 and max(draws) <= 7 and len(set(draws)) > 3
    again = make_engine()
    again.output_length(7, ignore_eos=True)
    assert [again.output_length(7, ignore_eos=False) for _ in range(200)] == draws


def test_latency_histograms_measure_from_arrival() -> None:
    eng = make_engine(max_num_seqs=1, prefill_time_per_token=0.0)
    first = eng.submit("a", ids(4), 1, now=0.0)
    eng.schedule(0.0)
    second = eng.submit("b", ids(4, 10), 1, now=0.0)  # queued behind "a" for 1 s
    eng.finish(first, 1.0, "length", 1)
    eng.schedule(1.0)
    eng.finish(second, second.first_token_at, "length", 1)
    st = eng.stats
    assert st.queue_time.total == pytest.approx(1.0)
    assert st.ttft.total == pytest.approx(0.010 + 1.010)  # TTFT includes the wait in the queue
    assert st.e2e.total == pytest.approx(1.0 + 1.010)
    assert st.ttft.count == st.e2e.count == st.queue_time.count == 2


def test_prefill_slots_serialise_prefills() -> None:
    eng = make_engine(prefill_slots=1, prefill_overhead=0.0, prefill_time_per_token=0.01)
    a = eng.submit("a", ids(10), 1, now=0.0)
    b = eng.submit("b", ids(20, 100), 1, now=0.0)
    eng.schedule(0.0)
    assert a.first_token_at == pytest.approx(0.10)  # 10 tokens x 10 ms
    assert b.start_at == pytest.approx(0.10)  # waits for a's prefill to end
    assert b.first_token_at == pytest.approx(0.30)
    c = eng.submit("c", ids(5, 200), 1, now=1.0)  # slot idle again: no wait
    eng.schedule(1.0)
    assert c.first_token_at == pytest.approx(1.05)


def test_unlimited_prefill_slots_overlap() -> None:
    eng = make_engine(prefill_overhead=0.0, prefill_time_per_token=0.01)
    a = eng.submit("a", ids(10), 1, now=0.0)
    b = eng.submit("b", ids(20, 100), 1, now=0.0)
    eng.schedule(0.0)
    assert (a.first_token_at, b.first_token_at) == pytest.approx((0.10, 0.20))
