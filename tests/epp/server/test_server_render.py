"""token-producer's vLLM render backend (epp.server.render), against real HTTP servers on 127.0.0.1.

Cases ported from llm-d-router (commit ebab68792),
pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer/vllm_http_test.go:
TestVLLMHTTPRenderer_Render, TestProduce_CompletionsVLLMHTTPUsesRawPayload,
TestProduce_ChatCompletionsVLLMHTTPUsesRawPayload, TestVLLMHTTPRenderer_RenderMultiPrompt,
TestVLLMHTTPRenderer_HTTPError, TestVLLMHTTPRenderer_ChatTimeoutRawMessages; plus pyepp's bounds
(timeout, answer size) and the pyepp simulator's render endpoints.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import orjson
import pytest
from aiohttp import web
from srv_helpers import FakeScheduler, destination, make_server, request_body, request_headers, stub
from testutil import eventually

from epp.server.render import TokenRenderer, token_renderer
from scheduler.cycle_state import CycleState
from scheduler.handle import PluginHandle
from scheduler.plugins.tokens.producer import TokenProducer, factory
from scheduler.types import ApiKind, LLMRequest, SchedulingResult
from simulator.config import SimConfig
from simulator.server import SimServer
from simulator.tokenizer import OfflineTokenizer

MODEL = "test-model"


class Fixture:
    """Mimics vLLM's /render endpoints; records what it received."""

    def __init__(self) -> None:
        self.completions: list[dict[str, Any]] = []
        self.chat: list[dict[str, Any]] = []
        self.completions_answer: Any = [{"token_ids": [1, 2, 3]}]
        self.chat_answer: Any = {"token_ids": [7, 8]}
        self.status = 200
        self.delay = 0.0
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions/render", self._handler(self.completions, "completions_answer"))
        app.router.add_post("/v1/chat/completions/render", self._handler(self.chat, "chat_answer"))
        return app

    def _handler(self, seen: list[dict[str, Any]], answer: str) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            seen.append(orjson.loads(await request.read()))
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.status != 200:
                return web.Response(status=self.status, text="bad request: " + "x" * 5000)
            return web.Response(body=orjson.dumps(getattr(self, answer)), content_type="application/json")

        return handle


@pytest.fixture
async def fixture() -> AsyncIterator[Fixture]:
    fx = Fixture()
    runner = web.AppRunner(fx.app(), shutdown_timeout=0.1)  # a slow answer is not waited for
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fx.url = f"http://127.0.0.1:{port}"
    try:
        yield fx
    finally:
        await runner.cleanup()


def producer(url: str, **vllm: str) -> TokenProducer:
    plugin = factory("token-producer", {"modelName": MODEL, "vllm": {"url": url, **vllm}}, PluginHandle())
    assert isinstance(plugin, TokenProducer)
    return plugin


def request(api: ApiKind, rid: str = "r1") -> LLMRequest:
    return LLMRequest(request_id=rid, model="client-model", target_model="client-model", api=api)


async def rendered(
    renderer: TokenRenderer, plugin: TokenProducer, api: ApiKind, body: dict[str, Any] | bytes
) -> tuple[int, ...] | None:
    req = request(api)
    await renderer.render(req, body if isinstance(body, bytes) else orjson.dumps(body))
    return plugin.tokens(CycleState(), req)


async def test_completions_forward_the_raw_payload_with_the_model_stamped(fixture: Fixture) -> None:
    plugin = producer(fixture.url)
    renderer = TokenRenderer([plugin])
    body = {"model": "client-model", "prompt": "hello", "dummy_field": "kept"}
    assert await rendered(renderer, plugin, ApiKind.COMPLETIONS, body) == (1, 2, 3)
    assert fixture.completions == [{"model": MODEL, "prompt": "hello", "dummy_field": "kept"}]
    await renderer.aclose()


async def test_chat_forwards_the_raw_payload(fixture: Fixture) -> None:
    plugin = producer(fixture.url)
    renderer = TokenRenderer([plugin])
    body = {"model": "x", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}
    assert await rendered(renderer, plugin, ApiKind.CHAT_COMPLETIONS, body) == (7, 8)
    assert fixture.chat == [{**body, "model": MODEL}]
    await renderer.aclose()


async def test_multi_prompt_ids_are_concatenated(fixture: Fixture) -> None:
    fixture.completions_answer = [{"token_ids": [1, 2]}, {"token_ids": [3]}]
    plugin = producer(fixture.url)
    renderer = TokenRenderer([plugin])
    body = {"model": "x", "prompt": ["a b", "c"]}
    assert await rendered(renderer, plugin, ApiKind.COMPLETIONS, body) == (1, 2, 3)
    assert fixture.completions[0]["prompt"] == ["a b", "c"]
    await renderer.aclose()


async def test_token_id_prompts_pass_through_without_a_call(fixture: Fixture) -> None:
    plugin = producer(fixture.url)
    renderer = TokenRenderer([plugin])
    assert await rendered(renderer, plugin, ApiKind.COMPLETIONS, {"prompt": [11, 22, 33]}) == (11, 22, 33)
    assert fixture.completions == []
    await renderer.aclose()


@pytest.mark.parametrize(
    ("setup", "api", "body"),
    [
        (lambda fx: setattr(fx, "status", 400), ApiKind.COMPLETIONS, {"prompt": "p"}),  # HTTPError
        (lambda fx: setattr(fx, "completions_answer", []), ApiKind.COMPLETIONS, {"prompt": "p"}),  # empty
        (lambda fx: setattr(fx, "chat_answer", {"ids": [1]}), ApiKind.CHAT_COMPLETIONS, {"messages": []}),
        (
            lambda fx: setattr(fx, "chat_answer", {"token_ids": [-1]}),
            ApiKind.CHAT_COMPLETIONS,
            {"messages": []},
        ),
        (lambda fx: None, ApiKind.CHAT_COMPLETIONS, b"{not json"),  # the request body is not JSON
        (lambda fx: None, ApiKind.EMBEDDINGS, {"input": "x"}),  # not a render request kind
    ],
)
async def test_failures_leave_the_request_without_ids(
    fixture: Fixture, setup: Callable[[Fixture], None], api: ApiKind, body: Any
) -> None:
    setup(fixture)
    plugin = producer(fixture.url)
    renderer = TokenRenderer([plugin])
    if api is ApiKind.EMBEDDINGS:
        assert not renderer.wants(request(api))
        return
    assert await rendered(renderer, plugin, api, body) is None
    await renderer.aclose()


async def test_timeout_and_multimodal_timeout(fixture: Fixture) -> None:
    fixture.delay = 1.0
    plugin = producer(fixture.url, timeout="50ms", mmTimeout="5s")
    renderer = TokenRenderer([plugin])
    loop = asyncio.get_running_loop()
    start = loop.time()
    text = {"messages": [{"role": "user", "content": "hi"}]}
    assert await rendered(renderer, plugin, ApiKind.CHAT_COMPLETIONS, text) is None
    assert loop.time() - start < 0.75  # gave up at the text timeout, not after the 1 s answer
    # Array content (multimodal parts): mmTimeout applies, the slow answer arrives in time.
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert await rendered(renderer, plugin, ApiKind.CHAT_COMPLETIONS, parts) == (7, 8)
    await renderer.aclose()


async def test_answers_over_the_size_cap_are_dropped(fixture: Fixture) -> None:
    fixture.chat_answer = {"token_ids": list(range(50_000))}
    plugin = producer(fixture.url)
    small = TokenRenderer([plugin], max_response_bytes=1024)
    assert await rendered(small, plugin, ApiKind.CHAT_COMPLETIONS, {"messages": []}) is None
    large = TokenRenderer([plugin])
    assert await rendered(large, plugin, ApiKind.CHAT_COMPLETIONS, {"messages": []}) == tuple(range(50_000))
    await small.aclose()
    await large.aclose()


async def test_unreachable_server_fails_fast() -> None:
    plugin = producer("http://127.0.0.1:9")  # discard port: nothing listens
    renderer = TokenRenderer([plugin])
    assert await rendered(renderer, plugin, ApiKind.COMPLETIONS, {"prompt": "p"}) is None
    await renderer.aclose()


def test_renderer_only_for_vllm_backed_producers() -> None:
    estimate = factory("token-producer", {}, PluginHandle())
    assert token_renderer([estimate]) is None
    assert token_renderer([]) is None
    assert token_renderer([estimate, producer("http://127.0.0.1:1")]) is not None


async def test_against_the_simulator_render_endpoints() -> None:
    sim = SimServer(SimConfig(model=MODEL, port=0, time_scale=50.0), OfflineTokenizer())
    await sim.start()
    try:
        plugin = producer(f"http://127.0.0.1:{sim.port}")
        renderer = TokenRenderer([plugin])
        one = await rendered(renderer, plugin, ApiKind.COMPLETIONS, {"model": "x", "prompt": "a b"})
        assert one is not None and len(one) == 2
        chat = {"model": "x", "messages": [{"role": "user", "content": "hi there"}]}
        ids = await rendered(renderer, plugin, ApiKind.CHAT_COMPLETIONS, chat)
        assert ids is not None and len(ids) > 2
        await renderer.aclose()
    finally:
        await sim.stop()


# -- the async pre-scheduling step in the ext_proc server (both gRPC engines) -------------------------


class TokenReadingScheduler(FakeScheduler):
    """FakeScheduler with a token-producer among its plugins; records the ids it saw per request."""

    def __init__(self, plugin: TokenProducer) -> None:
        super().__init__()
        self.plugins = (plugin,)
        self.seen: dict[str, tuple[int, ...] | None] = {}

    def schedule(self, request: LLMRequest, endpoints: Any) -> SchedulingResult:
        self.seen[request.request_id] = self.plugins[0].tokens(CycleState(), request)
        return super().schedule(request, endpoints)


def chat_headers(rid: str) -> Any:
    return request_headers({"x-request-id": rid}, path="/v1/chat/completions")


CHAT = orjson.dumps({"model": "m1", "messages": [{"role": "user", "content": "hello"}]})


@pytest.mark.parametrize("engine", ["grpcio", "h2", "ngh2"])
async def test_server_renders_before_scheduling(fixture: Fixture, engine: str) -> None:
    sched = TokenReadingScheduler(producer(fixture.url))
    server = make_server(sched, engine=engine)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            call = stub(ch).Process()
            await call.write(chat_headers("r1"))
            await call.write(request_body(CHAT))
            routed = await call.read()
            assert destination(routed) == ("10.0.0.1:8000", "10.0.0.1:8000")
            assert sched.seen == {"r1": (7, 8)}
            assert fixture.chat == [{"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}]
            call.cancel()
            # A failed render: the request is still scheduled, without ids.
            fixture.status = 500
            call = stub(ch).Process()
            await call.write(chat_headers("r2"))
            await call.write(request_body(CHAT))
            assert destination(await call.read()) == ("10.0.0.1:8000", "10.0.0.1:8000")
            assert sched.seen["r2"] is None
            call.cancel()
    finally:
        await server.shutdown(grace=0)


@pytest.mark.parametrize("engine", ["grpcio", "h2", "ngh2"])
async def test_a_slow_render_holds_only_its_own_stream(fixture: Fixture, engine: str) -> None:
    fixture.delay = 0.4
    sched = TokenReadingScheduler(producer(fixture.url))
    server = make_server(sched, engine=engine)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            slow = stub(ch).Process()
            await slow.write(chat_headers("slow"))
            await slow.write(request_body(CHAT))
            await eventually(lambda: len(fixture.chat) == 1)
            # Another request on the same connection (header-only: nothing to render) is answered now.
            fast = stub(ch).Process()
            await fast.write(request_headers({"x-request-id": "fast"}, end_of_stream=True, path="/v1/models"))
            await asyncio.wait_for(fast.read(), 0.3)
            assert "slow" not in sched.seen
            assert destination(await slow.read())[0] == "10.0.0.1:8000"
            assert sched.seen["slow"] == (7, 8)
            # A stream reset while its render runs is never scheduled nor dispatched.
            gone = stub(ch).Process()
            await gone.write(chat_headers("gone"))
            await gone.write(request_body(CHAT))
            await eventually(lambda: len(fixture.chat) == 2)
            gone.cancel()
            await asyncio.sleep(0.6)
            assert "gone" not in sched.seen
            assert not [c for c in sched.calls if c[1] == "gone"]
    finally:
        await server.shutdown(grace=0)


@pytest.mark.parametrize(
    ("ids", "ok"),
    [([0, 1, 2**32 - 1], True), ([], True), ([1, True], False), ([1, -1], False), ([2**32], False),
     ([1.0], False), (["7"], False), ([None], False)],
)  # fmt: skip
def test_token_ids_are_unsigned_32_bit_ints(ids: list[object], ok: bool) -> None:
    from epp.server.render import _all_ids

    assert _all_ids(ids) is ok
