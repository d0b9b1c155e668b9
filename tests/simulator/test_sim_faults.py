"""Fault injection: forced and random errors, /metrics outages, crash, client disconnects."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
import orjson
import pytest
from sim_testlib import MODEL, sim_config, wait_for

from simulator.server import SimServer
from simulator.tokenizer import OfflineTokenizer

BODY = {"model": MODEL, "prompt": "x y z", "max_tokens": 2}


async def test_failure_injection_rate_and_types() -> None:
    srv = SimServer(
        sim_config(failure_injection_rate=50.0, failure_types=("rate_limit", "server_error")),
        OfflineTokenizer(),
    )
    await srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            statuses: Counter[int] = Counter()
            for _ in range(60):
                async with http.post(srv.url + "/v1/completions", data=orjson.dumps(BODY)) as r:
                    statuses[r.status] += 1
                    if r.status != 200:
                        assert (await r.json())["error"]["code"] == r.status
    finally:
        await srv.stop()
    assert set(statuses) == {200, 429, 500}
    assert 10 <= statuses[200] <= 50


async def test_invalid_forced_error_header_is_400() -> None:
    srv = SimServer(sim_config(), OfflineTokenizer())
    await srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            for value in ("abc", "200"):
                async with http.post(
                    srv.url + "/v1/completions", data=orjson.dumps(BODY), headers={"x-return-error": value}
                ) as r:
                    assert r.status == 400
    finally:
        await srv.stop()


async def test_metrics_hang_error_and_recovery() -> None:
    srv = SimServer(sim_config(), OfflineTokenizer())
    await srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(srv.url + "/admin/fault", json={"metrics": "hang"}) as r:
                assert r.status == 200 and (await r.json())["metrics"] == "hang"
            with pytest.raises(asyncio.TimeoutError):
                async with http.get(srv.url + "/metrics", timeout=aiohttp.ClientTimeout(total=0.3)) as r:
                    await r.read()
            async with http.get(srv.url + "/health") as r:  # everything else still answers
                assert r.status == 200
            srv.set_metrics_mode("error")
            async with http.get(srv.url + "/metrics") as r:
                assert r.status == 500
            async with http.post(srv.url + "/admin/fault", json={"metrics": "bogus"}) as r:
                assert r.status == 400
            async with http.post(srv.url + "/admin/fault", json={"metrics": "ok", "ready": False}) as r:
                assert await r.json() == {"metrics": "ok", "ready": False}
            async with http.get(srv.url + "/metrics") as r:
                assert r.status == 200
            async with http.get(srv.url + "/health/ready") as r:
                assert r.status == 503
    finally:
        await srv.stop()


async def test_crash_drops_connections_and_refuses_new_ones() -> None:
    srv = SimServer(sim_config(time_scale=1.0), OfflineTokenizer())
    await srv.start()
    url = srv.url
    try:
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "prompt": "long", "max_tokens": 500, "ignore_eos": True, "stream": True}
            async with http.post(url + "/v1/completions", data=orjson.dumps(body)) as resp:
                await resp.content.readuntil(b"\n\n")
                assert srv.engine.num_running == 1
                async with http.post(url + "/admin/crash") as r:
                    assert r.status == 200
                with pytest.raises(aiohttp.ClientError):
                    await resp.read()
            assert srv.engine.num_running == 0
            with pytest.raises(aiohttp.ClientConnectionError):
                async with http.get(url + "/health") as r:
                    await r.read()
            before = srv.engine
            await srv.start()  # the pod restarts on the same port with a cold engine
            assert srv.url == url and srv.engine is not before
            async with http.post(url + "/v1/completions", data=orjson.dumps(BODY)) as r:
                assert r.status == 200
    finally:
        await srv.stop()


async def test_client_disconnect_aborts_the_request() -> None:
    srv = SimServer(sim_config(time_scale=1.0), OfflineTokenizer())
    await srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "prompt": "bye", "max_tokens": 500, "ignore_eos": True}
            task = asyncio.create_task(http.post(srv.url + "/v1/completions", data=orjson.dumps(body)))
            await wait_for(lambda: srv.engine.num_running == 1, "the request to run")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await wait_for(lambda: srv.engine.num_running == 0, "the abort")
            assert srv.engine.kv.usage == 0.0
            assert srv.engine.stats.success["abort"] == 1
    finally:
        await srv.stop()


async def test_stream_disconnect_aborts_and_counts_sent_tokens() -> None:
    srv = SimServer(sim_config(time_scale=1.0), OfflineTokenizer())
    await srv.start()
    try:
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "prompt": "bye", "max_tokens": 500, "ignore_eos": True, "stream": True}
            resp = await http.post(srv.url + "/v1/completions", data=orjson.dumps(body))
            await resp.content.readuntil(b"\n\n")
            await resp.content.readuntil(b"\n\n")
            resp.close()  # drop the connection mid-stream
            await wait_for(lambda: srv.engine.num_running == 0, "the abort")
            assert srv.engine.kv.usage == 0.0
            assert srv.engine.stats.success["abort"] == 1
            assert 2 <= srv.engine.stats.generation_tokens < 500
            async with http.get(srv.url + "/health") as r:  # the server carries on
                assert r.status == 200
    finally:
        await srv.stop()
