"""KV cache events: what the cache records, and the ZMQ wire format a subscriber receives."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import aiohttp
import orjson
import pytest
from sim_testlib import MODEL, sim_config

from scheduler.plugins.precise.hashing import BlockKeyer
from simulator.kv_cache import KVCache, VllmBlockHasher, block_hashes
from simulator.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    binds,
    encode_event,
    expand_endpoint,
    lora_id,
)
from simulator.server import SimServer
from simulator.tokenizer import OfflineTokenizer

BS = 4


def test_cache_records_stored_removed_and_cleared() -> None:
    kv = KVCache(total_blocks=3, block_size=BS, record_events=True)
    ids = list(range(9))  # two full blocks and a partial one
    chain = block_hashes(ids, BS)
    assert kv.allocate(chain, 1, ids) == 0
    assert kv.drain_events() == [BlockStored(tuple(chain), None, tuple(ids[:8]), BS, None)]
    kv.release(chain, 1)
    assert kv.allocate(chain, 0, ids) == 2  # hits store nothing
    assert kv.drain_events() == []
    kv.release(chain, 0)
    other = list(range(100, 108))
    other_chain = block_hashes(other, BS, "sql-lora")
    kv.allocate(other_chain, 0, other, "sql-lora")
    # one never-used block is left, so the second new block evicts the LRU one: the old chain's tail
    assert kv.drain_events() == [
        BlockRemoved((chain[1],)),
        BlockStored(tuple(other_chain), None, tuple(other), BS, "sql-lora"),
    ]
    assert kv.contains(chain[0]) and not kv.contains(chain[1])
    assert not kv.clear()  # blocks in use
    kv.release(other_chain, 0)
    assert kv.clear()
    assert kv.drain_events() == [AllBlocksCleared()]
    assert kv.cached_blocks == 0


def test_new_blocks_after_a_hit_carry_their_parent() -> None:
    kv = KVCache(total_blocks=8, block_size=BS, record_events=True)
    base = list(range(8))
    kv.allocate(block_hashes(base, BS), 0, base)
    kv.drain_events()
    longer = [*base, 50, 51, 52, 53]
    chain = block_hashes(longer, BS)
    assert kv.allocate(chain, 0, longer) == 2
    assert kv.drain_events() == [BlockStored((chain[2],), chain[1], (50, 51, 52, 53), BS, None)]


def test_wire_encoding_and_endpoint_rules() -> None:
    stored = BlockStored((1, 2), None, (5, 6, 7, 8, 9, 10, 11, 12), 4, "a")
    assert encode_event(stored) == ["BlockStored", [1, 2], None, [5, 6, 7, 8, 9, 10, 11, 12], 4, lora_id("a"),
                                    "GPU", "a", None, None, None, None]  # fmt: skip
    assert encode_event(BlockRemoved((3,))) == ["BlockRemoved", [3], "GPU", None]
    assert encode_event(AllBlocksCleared()) == ["AllBlocksCleared"]
    assert lora_id(None) is None and lora_id("a") == lora_id("a") != lora_id("b")
    assert expand_endpoint("tcp://*:{port+1000}", 8000) == "tcp://*:9000"
    assert expand_endpoint("tcp://epp:{port}", 8001) == "tcp://epp:8001"
    assert binds("tcp://*:5557") and binds("ipc:///tmp/x") and not binds("tcp://127.0.0.1:5557")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_server_publishes_vllm_frames_to_a_subscriber() -> None:
    zmq = pytest.importorskip("zmq")
    zmq_asyncio = pytest.importorskip("zmq.asyncio")
    msgpack = pytest.importorskip("msgpack")
    port = free_port()
    ctx = zmq_asyncio.Context()
    sub = ctx.socket(zmq.SUB)
    sub.bind(f"tcp://127.0.0.1:{port}")  # the picker's side binds; each server connects (llm-d layout)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    srv = SimServer(sim_config(kv_events_endpoint=f"tcp://127.0.0.1:{port}"), OfflineTokenizer())
    await srv.start()
    try:
        async with aiohttp.ClientSession() as http:

            async def complete(prompt: str) -> None:
                body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
                async with http.post(srv.url + "/v1/completions", data=orjson.dumps(body)) as r:
                    assert r.status == 200

            frames: list[bytes] = []
            for attempt in range(30):  # until the subscription has reached the publisher
                await complete(f"warm up {attempt} a b c d e f g")
                if await sub.poll(100):
                    frames = await sub.recv_multipart()
                    break
            assert frames, "no KV event arrived"
            while await sub.poll(50):
                frames = await sub.recv_multipart()
            await complete("one two three four five six seven eight nine")
            topic, seq, payload = await asyncio.wait_for(sub.recv_multipart(), 5)
    finally:
        await srv.stop()
        sub.close(linger=0)
        ctx.term()
    assert topic == f"kv@127.0.0.1:{srv.port}@{MODEL}".encode()
    assert int.from_bytes(seq, "big") == int.from_bytes(frames[1], "big") + 1
    ts, events, rank = msgpack.unpackb(payload)
    assert isinstance(ts, float) and rank == 0
    tokens = OfflineTokenizer().encode("one two three four five six seven eight nine")
    keyer = BlockKeyer("sha256", os.environ.get("PYTHONHASHSEED", ""), BS)  # vLLM's default algorithm
    hashes = [int.from_bytes(d[-8:], "big") for d in keyer.digests(tokens)]
    assert VllmBlockHasher("sha256", os.environ.get("PYTHONHASHSEED", ""), BS)(tokens, BS) == hashes
    expected: list[Any] = [
        "BlockStored",
        hashes,
        None,
        tokens[:8],
        BS,
        None,
        "GPU",
        None,
        None,
        None,
        None,
        None,
    ]
    assert events == [expected]


def test_batches_are_byte_identical_to_vllms_msgspec_encoding() -> None:
    msgpack = pytest.importorskip("msgpack")
    msgspec = pytest.importorskip("msgspec")
    from tests.vllm_kv_structs import AllBlocksCleared as VAll
    from tests.vllm_kv_structs import BlockRemoved as VRemoved
    from tests.vllm_kv_structs import BlockStored as VStored
    from tests.vllm_kv_structs import KVEventBatch

    ours = [BlockStored((1, 2**63 + 5), 7, tuple(range(8)), 4, "ad"), BlockRemoved((3,)), AllBlocksCleared()]
    theirs = [
        VStored([1, 2**63 + 5], 7, list(range(8)), 4, lora_id("ad"), "GPU", "ad"),
        VRemoved([3], "GPU"),
        VAll(),
    ]
    packed = msgpack.Packer(use_bin_type=True).pack([1.25, [encode_event(e) for e in ours], 0])
    assert packed == msgspec.msgpack.encode(KVEventBatch(ts=1.25, events=theirs, data_parallel_rank=0))


async def test_unusable_endpoint_fails_start_cleanly() -> None:
    pytest.importorskip("zmq")
    cfg = sim_config(kv_events_endpoint="tcp://not a host:1", kv_events_mode="bind")
    srv = SimServer(cfg, OfflineTokenizer())
    with pytest.raises(OSError, match="--kv-events-endpoint"):
        await srv.start()
    await srv.stop()  # nothing left running
    with socket.socket() as s:  # and the HTTP port was released: it can be bound again
        s.bind(("127.0.0.1", srv.port))


async def test_comma_separated_endpoints_publish_to_each_subscriber() -> None:
    zmq = pytest.importorskip("zmq")
    zmq_asyncio = pytest.importorskip("zmq.asyncio")
    ports = [free_port(), free_port()]
    ctx = zmq_asyncio.Context()
    subs = []
    for port in ports:  # two picker replicas, each with its own bound socket
        sub = ctx.socket(zmq.SUB)
        sub.bind(f"tcp://127.0.0.1:{port}")
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        subs.append(sub)
    endpoint = ",".join(f"tcp://127.0.0.1:{p}" for p in ports)
    srv = SimServer(sim_config(kv_events_endpoint=endpoint), OfflineTokenizer())
    await srv.start()
    got = [False, False]
    try:
        async with aiohttp.ClientSession() as http:
            for attempt in range(50):
                body = {"model": MODEL, "prompt": f"warm up {attempt} a b c d e f g", "max_tokens": 1}
                async with http.post(srv.url + "/v1/completions", data=orjson.dumps(body)) as r:
                    assert r.status == 200
                for i, sub in enumerate(subs):
                    if await sub.poll(20):
                        got[i] = True
                        while await sub.poll(0):
                            await sub.recv_multipart()
                if all(got):
                    break
    finally:
        await srv.stop()
        for sub in subs:
            sub.close(linger=0)
        ctx.term()
    assert got == [True, True]
