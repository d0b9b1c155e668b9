"""``epp-bench precise``: the costs of exact prefix routing (issue 14's targets), printed PASS/MISS.

* **ingestion**: vLLM KV-event batches from 64 servers (msgpack, vLLM's struct layout: BlockStored runs
  of 4 blocks, a BlockRemoved for every second batch), unpacked and applied to the index; CPU time
  (``process_time``) per block event. Target <= 5 us. Measured twice: applied directly, and as the
  transport does it (each message handed to the ``kvEventsConfig.concurrency`` worker pool by a
  receiver that yields every 0.2 ms, the workers applying it on the event loop).
* **index memory**: bytes allocated (``tracemalloc``) per (block, server) entry with 64 servers
  holding ``--blocks`` blocks each, about a third of them shared. Target <= 100 B.
* **keys for an 8k-token prompt**: the prompt's block keys (vLLM ``sha256`` chain, 16-token blocks)
  when its first 6k tokens are a system prompt hashed before (the memo hit); with the simulator's
  offline tokenizer in front, tokenisation + hashing. Target <= 1 ms. (With a ``token-producer`` the
  model server's ``/render`` endpoint tokenises; the picker's own work is the hashing.)
* **in-process tokenizer** (``indexerConfig.tokenizersPoolConfig``, local backend): the same 8k-word
  prompt tokenised by :class:`~scheduler.plugins.precise.local_tokenizer.LocalTokenizer` from a
  ``tokenizer.json`` whose prefix cache holds the 6k-word system prompt (one request before), then
  hashed; CPU time (every thread of the process), the median of 15 prompts (25 without ``--quick``).
  Three tokenizers: ``epp-bench routing``'s fleet one (:func:`bench.routers.write_bench_tokenizer`,
  WordLevel, one word one token), a BPE trained here on a fixed corpus of the workloads' words (about
  1.6 tokens per word) and the same trained byte-level (GPT-2's and Llama 3's pre-tokenisation; cut
  before " word", no word memo). Target <= 1 ms for the cached case; the uncached one (a cold cache:
  the whole prompt tokenised) is printed as INFO.

* **render round trip** (``--render``): the request-path step a ``token-producer`` with ``vllm.url`` adds
  before scheduling (:class:`epp.server.render.TokenRenderer`), against a real ``epp-sim`` render
  sidecar on 127.0.0.1 (as ``epp-bench routing``'s ``picker-precise`` runs it): wall latency p50/p90
  per request and the picker's CPU per request, at 1 and 16 requests in flight. No target: it is the
  cost the approximate profile does not pay.

* **active-active** (``--active-active SCENARIO``): that ``epp-bench routing`` scenario (``--quick``)
  with ``picker-precise`` and ``picker-precise-x2`` (two picker replicas behind one Envoy, ext_proc
  round-robined over both, every server publishing its KV events to both), and ``picker-default`` /
  ``-x2`` beside them, and the ``-hash`` variants of both (``newPrefixPlacement: hash``) with their
  ``-x2``, and ``picker-precise-sync-x2`` / ``picker-default-sync-x2`` (two replicas sharing ownership
  and in-flight counts over ``--replica-sync-port``); prints the targets (two replicas' hit rate at
  most 2 points below one's) and the other profiles' changes. Minutes: ten fresh fleets.

Figures are medians of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from datalayer.kv_event_pool import SLICE, KVEventPool
from epp.config.flags import ManualHelpFormatter
from scheduler.plugins.precise.events import KVEventIngester
from scheduler.plugins.precise.hashing import BlockKeyer
from scheduler.plugins.precise.index import KVBlockIndex
from scheduler.plugins.precise.local_tokenizer import LocalTokenizer, LocalTokenizerSettings
from simulator.tokenizer import OfflineTokenizer
from simulator.workloads import VOCAB
from simulator.workloads import words as vocab_words

__all__ = ["main"]

INGEST_TARGET_US = 5.0
ENTRY_TARGET_BYTES = 100.0
KEYS_TARGET_MS = 1.0


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _batches(servers: int, batches: int, rng: random.Random) -> tuple[list[tuple[str, int, bytes]], int]:
    import msgpack

    pack = msgpack.Packer(use_bin_type=True).pack
    out: list[tuple[str, int, bytes]] = []
    blocks = 0
    for seq in range(batches):
        for s in range(servers):
            hashes = [rng.getrandbits(64) for _ in range(4)]
            stored = ["BlockStored", hashes, rng.getrandbits(64), list(range(64)), 16, None, "GPU", None]
            events: list[list[object]] = [[*stored, None, None, None, None]]
            blocks += 4
            if seq % 2:
                events.append(["BlockRemoved", hashes[:2], "GPU", None])
                blocks += 2
            out.append((f"10.0.{s // 256}.{s % 256}:8000", seq, pack([time.time(), events, 0])))
    return out, blocks


def ingestion_us(servers: int, batches: int, seed: int) -> float:
    """CPU microseconds per block event, unpacking included."""
    frames, blocks = _batches(servers, batches, random.Random(seed))
    import msgpack

    ingester = KVEventIngester(KVBlockIndex())
    ingest, unpack = ingester.ingest, msgpack.unpackb
    start = time.process_time()
    for source, seq, payload in frames:
        ingest(source, seq, unpack(payload, raw=False, strict_map_key=False))
    return (time.process_time() - start) / blocks * 1e6


def pooled_ingestion_us(servers: int, batches: int, seed: int, concurrency: int = 4) -> float:
    """CPU microseconds per block event through the worker pool, as the transport (``KVEventFeed``)."""
    frames, blocks = _batches(servers, batches, random.Random(seed))
    import msgpack

    ingester = KVEventIngester(KVBlockIndex())
    unpackb = msgpack.unpackb

    async def run() -> float:
        pool = KVEventPool(
            concurrency, ingester.ingest, lambda b: unpackb(b, raw=False, strict_map_key=False), lambda: None
        )
        pool.start()
        start = time.process_time()
        clock, turn = time.perf_counter, time.perf_counter()
        for source, seq, payload in frames:  # the receiver: a slice of messages, then a turn for the others
            pool.add(source, seq, payload)
            if clock() - turn >= SLICE:
                await asyncio.sleep(0)
                turn = clock()
        await pool.drain()
        spent = time.process_time() - start
        await pool.stop()
        assert pool.queue_drops == 0 and ingester.batches == len(frames)
        return spent

    return asyncio.run(run()) / blocks * 1e6


def render_round_trip(words: int, concurrency: int, requests: int, seed: int) -> tuple[float, float, float]:
    """(p50 ms, p90 ms, picker CPU ms per request) of ``/v1/completions/render`` calls to an epp-sim."""
    import subprocess
    import sys

    import httpx
    import orjson

    from devtools.stack import free_ports
    from epp.server.render import TokenRenderer
    from scheduler.plugins.tokens.params import parse_token_producer_params
    from scheduler.plugins.tokens.producer import TokenProducer
    from scheduler.types import ApiKind, LLMRequest

    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", str(port), "--model", "m"]
    sidecar = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or sidecar.poll() is not None:
                    raise RuntimeError("the epp-sim render sidecar did not start") from None
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        producer = TokenProducer(
            "t", parse_token_producer_params({"modelName": "m", "vllm": {"url": url}}, "t", "t")
        )
        rng = random.Random(seed)
        system = " ".join(f"w{rng.randrange(50_000)}" for _ in range(words))
        bodies = [orjson.dumps({"model": "m", "prompt": f"{system} question {i}", "max_tokens": 1})
                  for i in range(requests + 1)]  # fmt: skip

        async def run() -> tuple[list[float], float]:
            renderer = TokenRenderer([producer])
            slots = asyncio.Semaphore(concurrency)
            latencies: list[float] = []

            async def one(i: int) -> None:
                request = LLMRequest(f"r{i}", "m", "m", prompt_text="", api=ApiKind.COMPLETIONS)
                async with slots:
                    t0 = time.perf_counter()
                    await renderer.render(request, bodies[i])
                    latencies.append(time.perf_counter() - t0)

            await one(requests)  # connect
            latencies.clear()
            cpu = time.process_time()
            await asyncio.gather(*(one(i) for i in range(requests)))
            cpu = time.process_time() - cpu
            await renderer.aclose()
            return sorted(latencies), cpu

        lat, cpu = asyncio.run(run())
    finally:
        sidecar.terminate()
        sidecar.wait(10)
    return lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.9)] * 1e3, cpu / requests * 1e3


def entry_bytes(servers: int, blocks: int, seed: int) -> float:
    """Allocated bytes per (block, server) entry of a populated index."""
    rng = random.Random(seed)
    shared = [rng.getrandbits(60) for _ in range(blocks // 3)]
    own = [[rng.getrandbits(60) for _ in range(blocks - len(shared))] for _ in range(servers)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index = KVBlockIndex()
    for s in range(servers):
        # each server's keys as fresh int objects, as msgpack decodes them from its own events
        index.store(f"s{s}", [(k << 1) >> 1 for k in shared] + own[s])
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return used / index.size()


def keys_ms(tokens: int, shared_tokens: int, seed: int, tokenize: bool) -> float:
    """Milliseconds to key a ``tokens``-token prompt whose first ``shared_tokens`` were keyed before."""
    rng = random.Random(seed)
    words = [f"w{rng.randrange(50_000)}" for _ in range(tokens)]
    system = " ".join(words[:shared_tokens])
    tokenizer = OfflineTokenizer()
    keyer = BlockKeyer("sha256", "", 16)
    keyer.keys(tokenizer.encode(system + " warm"))  # the system prompt's blocks are memoised
    text = system + " " + " ".join(words[shared_tokens:])
    ids = tokenizer.encode(text)
    start = time.process_time()  # CPU time: the figure holds on a loaded machine too
    if tokenize:
        ids = OfflineTokenizer().encode(text)  # a fresh tokenizer: no memo of this text
    keyer.keys(ids)
    return (time.process_time() - start) * 1000


def _bpe_tokenizer(directory: Path, byte_level: bool = False) -> Path:
    """A BPE ``tokenizer.json`` (2,000 ids, whitespace pre-tokenisation, or byte-level as GPT-2's and
    Llama 3's) trained on a fixed corpus of the workloads' words: the same file every time."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    rng = random.Random(0)
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = (
        pre_tokenizers.ByteLevel(add_prefix_space=False) if byte_level else pre_tokenizers.Whitespace()
    )
    alphabet = pre_tokenizers.ByteLevel.alphabet() if byte_level else []
    trainer = trainers.BpeTrainer(
        vocab_size=2000, special_tokens=["[UNK]"], initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator([vocab_words(rng, 200) for _ in range(300)], trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory / "tokenizer.json"


def local_tokenizer_ms(
    words: int,
    shared_words: int,
    seed: int,
    bpe: bool,
    cached: bool,
    warm_words: bool = False,
    byte_level: bool = False,
) -> tuple[float, int]:
    """(CPU ms, ids) to tokenise in process and key a ``words``-word prompt whose first ``shared_words``
    were tokenised and keyed before (``cached``; else a cold cache); with ``warm_words`` every word of the
    workloads' vocabulary was seen before (the word memo's steady state)."""
    from bench.routers import write_bench_tokenizer

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        if bpe:
            path = _bpe_tokenizer(Path(tmp) / "bpe", byte_level)
        else:
            path = write_bench_tokenizer(Path(tmp) / "words")
        tok = LocalTokenizer(LocalTokenizerSettings(model_name="m", model_map={"m": str(path)}))
    system, question = vocab_words(rng, shared_words), vocab_words(rng, words - shared_words)
    keyer = BlockKeyer("sha256", "", 16)
    if warm_words:
        tok.completion_ids(" ".join(VOCAB))
    if cached:
        keyer.keys(tok.completion_ids(system + " warm") or ())
    start = time.process_time()
    ids = tok.completion_ids(f"{system} {question}") or []
    keyer.keys(ids)
    return (time.process_time() - start) * 1000, len(ids)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter, prog="epp-bench precise", description=__doc__.splitlines()[0]
    )
    p.add_argument("--servers", type=int, default=64, help="simulated servers publishing KV events")
    p.add_argument("--batches", type=int, default=200, help="batches per server (ingestion)")
    p.add_argument("--blocks", type=int, default=60_000, help="blocks per server (index memory)")
    p.add_argument("--repeats", type=int, default=5, help="runs per figure (the median is reported)")
    p.add_argument("--seed", type=int, default=1, help="random seed")
    p.add_argument("--quick", action="store_true", help="smaller figures (make bench)")
    p.add_argument(
        "--render", action="store_true", help="also time /render round trips to an epp-sim sidecar"
    )
    p.add_argument(
        "--active-active", metavar="SCENARIO", help="also run two replicas vs one on this scenario"
    )
    p.add_argument(
        "--out",
        help="report folder of --active-active (default bench/results/<UTC date>, as epp-bench routing)",
    )
    ns = p.parse_args(argv)
    if ns.quick:
        ns.batches, ns.blocks, ns.repeats = 50, 30_000, 3
    ingest = statistics.median(ingestion_us(ns.servers, ns.batches, ns.seed + r) for r in range(ns.repeats))
    pooled = statistics.median(
        pooled_ingestion_us(ns.servers, ns.batches, ns.seed + r) for r in range(ns.repeats)
    )
    sizes = (ns.blocks // 3, ns.blocks)
    reps = range(ns.repeats)
    memory = {n: statistics.median(entry_bytes(ns.servers, n, ns.seed + r) for r in reps) for n in sizes}
    # a single call costs about a millisecond: the median of many prompts (a few is noise)
    prompts = range(ns.repeats * 5)
    hashing = statistics.median(keys_ms(8192, 6144, ns.seed + r, False) for r in prompts)
    both = statistics.median(keys_ms(8192, 6144, ns.seed + r, True) for r in prompts)
    print(f"{_verdict(ingest <= INGEST_TARGET_US)} ingestion: {ingest:.2f} us CPU per block event at "
          f"{ns.servers} servers (target <= {INGEST_TARGET_US:g} us)")  # fmt: skip
    print(f"{_verdict(pooled <= INGEST_TARGET_US)} ingestion through the worker pool (concurrency 4, "
          f"a yield per {SLICE * 1e3:g} ms): {pooled:.2f} us CPU per block event "
          f"(target <= {INGEST_TARGET_US:g} us)")  # fmt: skip
    for n, size in memory.items():  # a set's fill (hence its bytes per entry) varies with its size
        print(f"{_verdict(size <= ENTRY_TARGET_BYTES)} index: {size:.1f} B per (block, server) entry with "
              f"{n} blocks per server (target <= {ENTRY_TARGET_BYTES:g} B)")  # fmt: skip
    print(f"{_verdict(hashing <= KEYS_TARGET_MS)} keys of an 8k-token prompt, 6k cached: {hashing:.3f} ms "
          f"hashing (target <= {KEYS_TARGET_MS:g} ms)")  # fmt: skip
    print(f"{_verdict(both <= KEYS_TARGET_MS)} epp-sim's offline tokenizer + keys of the same prompt: "
          f"{both:.3f} ms (target <= {KEYS_TARGET_MS:g} ms; the picker itself does not tokenise: "
          "token-producer renders on the model server)")  # fmt: skip
    kinds = (("WordLevel (bench fleet)", False, False), ("BPE (2,000 ids)", True, False),
             ("byte-level BPE (2,000 ids, cut before ' word')", True, True))  # fmt: skip
    for name, bpe, byte_level in kinds:
        cases = (
            ((True, False), (False, False)) if byte_level else ((True, False), (True, True), (False, False))
        )
        for cached, warm in cases:  # no word memo for byte-level: "every word seen" is the same case
            runs = [
                local_tokenizer_ms(8192, 6144, ns.seed + r, bpe, cached, warm, byte_level) for r in prompts
            ]
            ms, ids = statistics.median(r[0] for r in runs), runs[0][1]
            what = f"in-process tokenizer ({name}) + keys of an 8k-word prompt ({ids} ids)"
            if cached:
                seen = ", every word seen before" if warm else ""
                target = f"(target <= {KEYS_TARGET_MS:g} ms)"
                print(f"{_verdict(ms <= KEYS_TARGET_MS)} {what}, 6k words cached{seen}: {ms:.3f} ms {target}")
            else:
                print(f"INFO {what}, cold cache: {ms:.2f} ms (in the pre-scheduling step's thread pool)")
    if ns.render:
        for words in (1000, 4000):
            for concurrency in (1, 16):
                p50, p90, cpu = render_round_trip(words, concurrency, 200, ns.seed)
                print(f"INFO render round trip, {words}-word prompt, {concurrency} in flight: "
                      f"p50 {p50:.1f} ms, p90 {p90:.1f} ms, picker CPU {cpu:.2f} ms per request")  # fmt: skip
    if ns.active_active:
        from bench import routing

        routers = (
            "picker-precise,picker-precise-x2,picker-default,picker-default-x2,"
            "picker-precise-hash,picker-precise-hash-x2,picker-default-hash,picker-default-hash-x2,"
            "picker-precise-sync-x2,picker-default-sync-x2"
        )
        argv = ["--scenario", ns.active_active, "--quick", "--routers", routers, "--no-progress"]
        return routing.main([*argv, "--out", ns.out] if ns.out else argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
