"""HTTP surface of one in-process simulated server (port 0, fast time scale)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sim_testlib import MODEL, sim_config, wait_for

from simulator.server import SimServer
from simulator.tokenizer import OfflineTokenizer


@pytest.fixture
async def server() -> AsyncIterator[SimServer]:
    srv = SimServer(sim_config(), OfflineTokenizer())
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def post(
    http: aiohttp.ClientSession, srv: SimServer, path: str, body: Any, **kw: Any
) -> tuple[int, Any]:
    async with http.post(srv.url + path, data=orjson.dumps(body), **kw) as resp:
        raw = await resp.read()
        assert resp.headers["x-inference-port"] == str(srv.port)
        assert resp.headers["x-inference-pod"]
        try:
            return resp.status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return resp.status, raw.decode()


def sse_events(raw: bytes) -> list[str]:
    assert raw.endswith(b"data: [DONE]\n\n")
    frames = raw.decode().split("\n\n")
    assert frames[-1] == ""
    assert all(f.startswith("data: ") for f in frames[:-1])
    return [f[len("data: ") :] for f in frames[:-1]]


def metric_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "model_name"))
            assert sample.labels["model_name"] == MODEL
            out[(sample.name, labels)] = sample.value
    return out


async def test_completion_non_streaming_shape(server: SimServer, http: aiohttp.ClientSession) -> None:
    body = {"model": MODEL, "prompt": "hello there world", "max_tokens": 5, "ignore_eos": True, "unknown": 1}
    status, resp = await post(http, server, "/v1/completions", body)
    assert status == 200
    assert resp["object"] == "text_completion" and resp["id"].startswith("cmpl-") and resp["model"] == MODEL
    (choice,) = resp["choices"]
    assert choice["finish_reason"] == "length" and choice["index"] == 0 and isinstance(choice["text"], str)
    assert resp["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


async def test_chat_non_streaming_shape_and_cached_tokens(
    server: SimServer, http: aiohttp.ClientSession
) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "one two three four five six seven"}],
        "max_completion_tokens": 3,
        "ignore_eos": True,
    }
    _, first = await post(http, server, "/v1/chat/completions", body)
    status, second = await post(http, server, "/v1/chat/completions", body)
    assert status == 200 and second["object"] == "chat.completion"
    msg = second["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    prompt = second["usage"]["prompt_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt // 4 * 4 > 0


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("include_usage", [True, False])
async def test_sse_framing(
    server: SimServer, http: aiohttp.ClientSession, chat: bool, include_usage: bool
) -> None:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 4, "ignore_eos": True, "stream": True}
    if chat:
        body["messages"] = [{"role": "user", "content": "stream please"}]
    else:
        body["prompt"] = "stream please"
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    async with http.post(server.url + path, data=orjson.dumps(body)) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        raw = await resp.read()
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    usage_chunks = [c for c in chunks if not c["choices"]]
    content = [c for c in chunks if c["choices"]]
    if include_usage:
        assert usage_chunks == [chunks[-1]]
        assert chunks[-1]["usage"]["completion_tokens"] == 4
        assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    else:
        assert usage_chunks == []
    reasons = [c["choices"][0]["finish_reason"] for c in content]
    assert reasons[-1] == "length" and all(r is None for r in reasons[:-1])
    if chat:
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert content[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert len(content) == 5 and all("content" in c["choices"][0]["delta"] for c in content[1:])
    else:
        assert all(c["object"] == "text_completion" for c in chunks)
        assert len(content) == 4 and all(isinstance(c["choices"][0]["text"], str) for c in content)


async def test_errors_have_vllm_shape(server: SimServer, http: aiohttp.ClientSession) -> None:
    status, resp = await post(http, server, "/v1/completions", {"model": "nope", "prompt": "x"})
    assert status == 404 and resp["error"]["code"] == 404 and resp["error"]["type"] == "NotFoundError"
    status, resp = await post(http, server, "/v1/completions", {"model": MODEL, "prompt": 5})
    assert status == 400 and resp["error"]["param"] == "prompt"
    status, resp = await post(http, server, "/v1/chat/completions", {"model": MODEL, "messages": []})
    assert status == 400
    status, resp = await post(http, server, "/v1/completions", {"model": MODEL, "prompt": ""})
    assert status == 400 and "empty" in resp["error"]["message"]
    status, resp = await post(
        http, server, "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 0}
    )
    assert status == 400
    async with http.post(server.url + "/v1/completions", data=b"{not json") as r:
        assert r.status == 400 and (await r.json())["error"]["code"] == 400
    status, resp = await post(
        http, server, "/v1/completions", {"model": MODEL, "prompt": "x"}, headers={"x-return-error": "503"}
    )
    assert status == 503 and resp["error"]["code"] == 503
    status, resp = await post(
        http, server, "/v1/completions", {"model": MODEL, "prompt": "x" * 9, "max_tokens": 2000}
    )
    assert status == 400 and "maximum context length" in resp["error"]["message"]
    async with http.get(server.url + "/no/such/path") as r:
        assert r.status == 404 and (await r.json())["error"]["code"] == 404


async def test_queue_full_is_429() -> None:
    srv = SimServer(
        sim_config(max_num_seqs=1, max_waiting_queue_length=1, time_scale=1.0), OfflineTokenizer()
    )
    await srv.start()
    tasks: list[asyncio.Task[Any]] = []
    try:
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "prompt": "busy", "max_tokens": 1000, "ignore_eos": True}  # ~10 s
            tasks.append(asyncio.create_task(post(http, srv, "/v1/completions", body)))
            await wait_for(lambda: srv.engine.num_running == 1, "the first request to run")
            tasks.append(asyncio.create_task(post(http, srv, "/v1/completions", body)))
            await wait_for(lambda: srv.engine.num_waiting == 1, "the second request to queue")
            status, resp = await post(http, srv, "/v1/completions", body)
            assert status == 429 and resp["error"]["code"] == 429
            async with http.get(srv.url + "/get_load") as r:
                assert await r.json() == {"server_load": 2}
            for task in tasks:  # the clients give up: both requests are aborted
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await wait_for(lambda: srv.engine.num_running + srv.engine.num_waiting == 0, "the aborts")
    finally:
        await srv.stop()


async def test_embeddings_render_tokenize(server: SimServer, http: aiohttp.ClientSession) -> None:
    status, resp = await post(http, server, "/v1/embeddings", {"model": MODEL, "input": ["a b", "c"]})
    assert status == 200 and resp["object"] == "list" and len(resp["data"]) == 2
    assert resp["data"][1]["index"] == 1 and len(resp["data"][0]["embedding"]) == 64
    assert resp["usage"]["prompt_tokens"] == 3
    status, render = await post(
        http, server, "/v1/completions/render", {"model": MODEL, "prompt": ["a b", "c"]}
    )
    assert status == 200 and [len(r["token_ids"]) for r in render] == [2, 1]
    status, one = await post(http, server, "/v1/completions/render", {"model": MODEL, "prompt": "a b"})
    assert one == [render[0]]
    msgs = [{"role": "user", "content": "hi"}]
    status, chat = await post(http, server, "/v1/chat/completions/render", {"model": MODEL, "messages": msgs})
    assert status == 200 and isinstance(chat["token_ids"], list) and chat["token_ids"]
    status, tok = await post(http, server, "/tokenize", {"model": MODEL, "prompt": "a b"})
    assert tok == {"count": 2, "max_model_len": 1024, "tokens": render[0]["token_ids"], "token_strs": None}
    status, tok = await post(http, server, "/tokenize", {"model": MODEL, "messages": msgs})
    assert tok["tokens"] == chat["token_ids"]


async def test_models_and_lora_lifecycle(server: SimServer, http: aiohttp.ClientSession) -> None:
    async with http.get(server.url + "/v1/models") as r:
        models = await r.json()
    assert models["object"] == "list"
    base, lora = models["data"]
    assert base == {
        "id": MODEL,
        "object": "model",
        "created": server.created,
        "owned_by": "vllm",
        "root": MODEL,
        "parent": None,
        "max_model_len": 1024,
        "permission": [],
    }
    assert lora["id"] == "sql-lora" and lora["parent"] == MODEL and lora["root"] == "/adapters/sql"
    status, text = await post(http, server, "/v1/load_lora_adapter", {"lora_name": "new", "lora_path": "/p"})
    assert status == 200 and "Success" in text
    status, err = await post(http, server, "/v1/load_lora_adapter", {"lora_name": "new", "lora_path": "/p"})
    assert status == 400 and err["error"]["code"] == 400
    status, resp = await post(
        http, server, "/v1/completions", {"model": "new", "prompt": "x", "max_tokens": 1}
    )
    assert status == 200 and resp["model"] == "new"
    status, _ = await post(http, server, "/v1/unload_lora_adapter", {"lora_name": "new"})
    assert status == 200
    status, err = await post(http, server, "/v1/unload_lora_adapter", {"lora_name": "new"})
    assert status == 404
    async with http.get(server.url + "/v1/models") as r:
        assert [m["id"] for m in (await r.json())["data"]] == [MODEL, "sql-lora"]


async def test_metrics_parse_and_move(http: aiohttp.ClientSession) -> None:
    # real time (scale 1) so the stream below is still running when /metrics is read mid-way
    server = SimServer(sim_config(time_scale=1.0), OfflineTokenizer())
    await server.start()
    try:
        await _metrics_parse_and_move(server, http)
    finally:
        await server.stop()


async def _metrics_parse_and_move(server: SimServer, http: aiohttp.ClientSession) -> None:
    async with http.get(server.url + "/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        before = metric_values(await r.text())
    assert (
        before[
            (
                "vllm:cache_config_info",
                (("block_size", "4"), ("enable_prefix_caching", "True"), ("num_gpu_blocks", "256")),
            )
        ]
        == 1.0
    )
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ):
        assert before[(name, ())] == 0.0
    body = {
        "model": "sql-lora",
        "prompt": "a b c d e f g h",
        "max_tokens": 100,  # 1 s at 10 ms per token: still running when /metrics is read
        "ignore_eos": True,
        "stream": True,
    }
    async with http.post(server.url + "/v1/completions", data=orjson.dumps(body)) as resp:
        await resp.content.readuntil(b"\n\n")  # first token is out: the request is running
        async with http.get(server.url + "/metrics") as r:
            during = metric_values(await r.text())
        await resp.read()
    assert during[("vllm:num_requests_running", ())] == 1.0
    assert during[("vllm:kv_cache_usage_perc", ())] == pytest.approx(27 / 256)  # ceil((8 + 100) / 4)
    assert during[("vllm:gpu_cache_usage_perc", ())] == during[("vllm:kv_cache_usage_perc", ())]
    lora_info = [k for k in during if k[0] == "vllm:lora_requests_info"]
    assert lora_info == [
        (
            "vllm:lora_requests_info",
            (("max_lora", "2"), ("running_lora_adapters", "sql-lora"), ("waiting_lora_adapters", "")),
        )
    ]
    await post(
        http, server, "/v1/completions", {"model": "sql-lora", "prompt": "a b c d e f g h", "max_tokens": 2}
    )
    async with http.get(server.url + "/metrics") as r:
        after = metric_values(await r.text())
    assert after[("vllm:num_requests_running", ())] == 0.0
    assert after[("vllm:prompt_tokens_total", ())] == 16.0
    assert after[("vllm:prefix_cache_queries_total", ())] == 16.0
    assert after[("vllm:prefix_cache_hits_total", ())] == 8.0
    assert after[("vllm:generation_tokens_total", ())] >= 101.0
    assert after[("vllm:request_success_total", (("finish_reason", "length"),))] >= 1.0
    assert after[("vllm:time_to_first_token_seconds_count", ())] == 2.0
    assert after[("vllm:e2e_request_latency_seconds_count", ())] == 2.0
    assert after[("vllm:request_queue_time_seconds_count", ())] == 2.0
    assert after[("vllm:inter_token_latency_seconds_count", ())] >= 99.0
    assert after[("vllm:time_to_first_token_seconds_bucket", (("le", "+Inf"),))] == 2.0


async def test_health_ready_load_and_startup_delay(http: aiohttp.ClientSession) -> None:
    now = [100.0]
    srv = SimServer(sim_config(startup_duration=2.0), OfflineTokenizer(), monotonic=lambda: now[0])
    await srv.start()
    try:
        async with http.get(srv.url + "/health") as r:
            assert r.status == 200
        async with http.get(srv.url + "/health/ready") as r:
            assert r.status == 503
        status, _ = await post(http, srv, "/v1/completions", {"model": MODEL, "prompt": "x"})
        assert status == 503
        now[0] += 1.9
        async with http.get(srv.url + "/health/ready") as r:
            assert r.status == 503
        now[0] += 0.1
        async with http.get(srv.url + "/health/ready") as r:
            assert r.status == 200
        for path in ("/get_load", "/load"):
            async with http.get(srv.url + path) as r:
                assert await r.json() == {"server_load": 0}
    finally:
        await srv.stop()


async def test_queued_stream_gets_headers_before_admission(http: aiohttp.ClientSession) -> None:
    srv = SimServer(sim_config(max_num_seqs=1, time_scale=1.0), OfflineTokenizer())
    await srv.start()
    try:
        busy = {"model": MODEL, "prompt": "busy", "max_tokens": 1000, "ignore_eos": True}  # ~10 s
        first = asyncio.create_task(post(http, srv, "/v1/completions", busy))
        await wait_for(lambda: srv.engine.num_running == 1, "the first request to run")
        body = {"model": MODEL, "prompt": "queued", "max_tokens": 2, "stream": True}
        async with http.post(srv.url + "/v1/completions", data=orjson.dumps(body)) as resp:
            assert resp.status == 200 and resp.headers["x-inference-port"] == str(srv.port)
            assert srv.engine.num_waiting == 1  # headers arrived while the request still waits
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await wait_for(lambda: srv.engine.num_running + srv.engine.num_waiting == 0, "the aborts")
    finally:
        await srv.stop()
