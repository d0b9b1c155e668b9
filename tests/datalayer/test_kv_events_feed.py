"""The KV-event transport with a real epp-sim publisher: per-endpoint subscriptions (the picker connects
to each server's bound PUB socket) and endpoint removal."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import orjson
import pytest

from datalayer.kv_events import KVEventFeed, kv_event_sources, topic_source
from devtools.stack import free_ports
from scheduler.plugins.precise.params import parse_precise_params
from scheduler.plugins.precise.producer import PrecisePrefixCacheProducer
from simulator.config import SimConfig
from simulator.server import SimServer
from simulator.tokenizer import OfflineTokenizer

pytest.importorskip("zmq")
MODEL = "sim-model"


def test_topic_source() -> None:
    assert topic_source(b"kv@10.0.0.1:8000@m/x") == "10.0.0.1:8000"
    assert topic_source(b"kv@10.0.0.1@m") == "10.0.0.1"
    assert topic_source(b"kv-no-id") == ""


def test_feed_follows_endpoints_only_when_no_configured_source_does() -> None:
    params = parse_precise_params({}, "precise-prefix-cache-producer", "p")
    plugin = PrecisePrefixCacheProducer("p", params, lambda: 0.0)
    sources = kv_event_sources([plugin, object()], [])
    assert len(sources) == 1 and isinstance(sources[0], KVEventFeed) and sources[0].extractors == (plugin,)
    assert plugin.transport is sources[0]


async def test_per_endpoint_subscription_indexes_the_servers_blocks() -> None:
    (kv_port,) = free_ports(1)
    seed = os.environ.get("PYTHONHASHSEED", "")
    cfg = SimConfig(
        model=MODEL,
        port=0,
        time_scale=50.0,
        block_size=4,
        kv_cache_size=256,
        kv_events_endpoint=f"tcp://127.0.0.1:{kv_port}",
        kv_events_mode="bind",
    )
    server = SimServer(cfg, OfflineTokenizer())
    await server.start()
    params = parse_precise_params(
        {
            "tokenProcessorConfig": {"blockSize": 4, "hashSeed": seed},
            "kvEventsConfig": {"podDiscoveryConfig": {"socketPort": kv_port}},
        },
        "precise-prefix-cache-producer",
        "p",
    )
    plugin = PrecisePrefixCacheProducer("p", params, lambda: 0.0)
    feed = KVEventFeed(plugin, follow_endpoints=True)
    address = f"127.0.0.1:{server.port}"
    feed.endpoint_added(address)  # before start: remembered
    await feed.start()
    assert feed.subscribed() == [address]
    prompt = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    keys = plugin.keyer.keys(OfflineTokenizer().encode(prompt))
    try:
        async with aiohttp.ClientSession() as http:

            async def complete(text: str) -> None:
                body = {"model": MODEL, "prompt": text, "max_tokens": 1}
                async with http.post(server.url + "/v1/completions", data=orjson.dumps(body)) as r:
                    assert r.status == 200

            for attempt in range(100):  # distinct prompts until the subscription reaches the publisher
                await complete(f"warm {attempt} up a b c d e")
                await asyncio.sleep(0.05)
                if plugin.ingester.batches:
                    break
            await complete(prompt)
            for _ in range(100):
                await asyncio.sleep(0.02)
                if plugin.index.match(keys, address).blocks == len(keys):
                    break
        assert plugin.index.match(keys, address).blocks == len(keys) == 3
        assert plugin.ingester.hash_mismatches == 0 and plugin.ingester.hash_checks > 0
        feed.endpoint_removed(address)
        plugin.forget(address)
        assert feed.subscribed() == [] and plugin.index.size() == 0
    finally:
        await feed.stop()
        await server.stop()


async def test_central_mode_bind_failure_names_the_parameter() -> None:
    import zmq

    (port,) = free_ports(1)
    holder = zmq.Context.instance().socket(zmq.SUB)
    holder.bind(f"tcp://127.0.0.1:{port}")
    try:
        params = parse_precise_params(
            {"kvEventsConfig": {"zmqEndpoint": f"tcp://127.0.0.1:{port}"}}, "precise-prefix-cache-scorer", "p"
        )
        feed = KVEventFeed(PrecisePrefixCacheProducer("p", params, lambda: 0.0), follow_endpoints=False)
        with pytest.raises(RuntimeError, match=r"kvEventsConfig\.zmqEndpoint"):
            await feed.start()
        feed.endpoint_added("127.0.0.1:8000")  # central mode: no per-endpoint sockets
        assert feed.subscribed() == []
        await feed.stop()
    finally:
        holder.close(linger=0)


async def test_a_failing_connect_is_counted_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    import datalayer.kv_events as kv

    monkeypatch.setattr(kv, "RETRY_INTERVAL", 0.01)
    params = parse_precise_params(
        {"kvEventsConfig": {"concurrency": 2}}, "precise-prefix-cache-producer", "p"
    )
    feed = KVEventFeed(PrecisePrefixCacheProducer("p", params, lambda: 0.0), follow_endpoints=True)
    await feed.start()
    try:
        feed.endpoint_added("bad host:8000")  # not a ZMQ address: connect fails at once
        for _ in range(200):
            await asyncio.sleep(0.01)
            if feed.reconnections.get("bad host:8000", 0) >= 2:
                break
        assert feed.errors[("bad host:8000", "connect")] >= 2
        assert feed.reconnections["bad host:8000"] >= 2
        stats = feed.stats()
        assert stats["concurrency"] == 2 and stats["subscriptions"] == 1 and stats["queue_depth"] == 0
        feed.endpoint_removed("bad host:8000")  # its series go with it
        assert not feed.errors and not feed.reconnections
    finally:
        await feed.stop()
