"""HTTP handlers of one simulated server (the OpenAI/vLLM API surface).

Each handler validates input (errors -> vLLM error body with the right status), consults the engine
through its :class:`~simulator.driver.EngineDriver`, and answers in vLLM's shapes. Generation:

1. forced error (``x-return-error: <status>`` header) or injected failure (``--failure-injection-rate``);
2. parse and resolve the model (base model or a registered LoRA adapter, else 404);
3. output length: ``max_tokens``/``max_completion_tokens`` (default ``min(default_max_tokens,
   max_model_len - prompt)``); ``ignore_eos`` -> exactly that, else a seeded draw in ``[1, max]``;
4. submit to the engine (429 when the waiting queue is full); a stream sends its headers at once, as
   vLLM does; wait for admission and the first token, then stream frames as tokens fall due (or wait
   the whole decode for a non-streamed answer);
5. every admitted request ends in ``finish`` or (on disconnect/error) ``abort``.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from simulator.config import FAILURE_TYPES
from simulator.embeddings import embedding_vector
from simulator.engine import EngineError, Seq, SeqState
from simulator.protocol import (
    ApiError,
    GenerationRequest,
    chat_token_ids,
    parse_generation,
    parse_json,
    prompt_token_lists,
    require_model,
)
from simulator.responses import DONE, StreamRenderer, completion_body, output_text, usage

if TYPE_CHECKING:
    from simulator.server import SimServer

__all__ = ["SimApi"]

_JSON = "application/json"


@dataclass(slots=True)
class _Job:
    """One generation request in flight: what to produce and how much was sent."""

    req: GenerationRequest
    request_id: str
    counter: int
    n_out: int
    reason: str
    emitted: int = 0


def _json(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type=_JSON)


class SimApi:
    """Route handlers bound to one :class:`~simulator.server.SimServer`."""

    def __init__(self, server: SimServer, rng: random.Random) -> None:
        self.s = server
        self._fault_rng = rng
        self._counter = 0

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat_completions),
            web.post("/v1/embeddings", self.embeddings),
            web.post("/v1/completions/render", self.render_completions),
            web.post("/v1/chat/completions/render", self.render_chat),
            web.post("/tokenize", self.tokenize),
            web.post("/v1/load_lora_adapter", self.load_lora),
            web.post("/v1/unload_lora_adapter", self.unload_lora),
            web.get("/v1/models", self.models),
        ]

    # -- helpers ------------------------------------------------------------------------------------
    def _resolve(self, model: str) -> str | None:
        """None for the base model, the adapter name for a LoRA; 404 otherwise."""
        if model in self.s.config.served_names:
            return None
        if self.s.engine.lora.is_registered(model):
            return model
        raise ApiError(404, f"The model `{model}` does not exist.", param="model")

    def _check_faults(self, request: web.Request) -> None:
        self.s.require_ready()
        forced = request.headers.get("x-return-error")
        if forced is not None:
            try:
                status = int(forced)
            except ValueError:
                raise ApiError(400, f"x-return-error must be an HTTP status code, got {forced!r}") from None
            if not 400 <= status <= 599:
                raise ApiError(400, f"x-return-error must be a status in 400-599, got {status}")
            raise ApiError(status, f"error forced by x-return-error: {status}")
        rate = self.s.config.failure_injection_rate
        if rate > 0 and self._fault_rng.random() * 100 < rate:
            kinds = self.s.config.failure_types or tuple(FAILURE_TYPES)
            status, kind, message = FAILURE_TYPES[self._fault_rng.choice(kinds)]
            raise ApiError(status, message, kind)

    def _next_id(self, prefix: str) -> tuple[str, int]:
        self._counter += 1
        return f"{prefix}-{uuid.uuid4().hex}", self._counter

    # -- generation ---------------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        self._check_faults(request)
        req = parse_generation(parse_json(await request.read()), self.s.tokenizer, chat)
        lora = self._resolve(req.model)
        cfg, driver = self.s.config, self.s.driver
        prompt_tokens = len(req.prompt_ids)
        default_limit = min(cfg.default_max_tokens, cfg.effective_max_model_len - prompt_tokens)
        limit = req.max_tokens or max(default_limit, 1)
        n_out = self.s.engine.output_length(limit, req.ignore_eos)
        request_id, counter = self._next_id("chatcmpl" if chat else "cmpl")
        job = _Job(req, request_id, counter, n_out, "length" if n_out >= limit else "stop")
        try:
            seq, admitted = driver.submit(job.request_id, req.prompt_ids, n_out, lora)
        except EngineError as exc:
            raise ApiError(exc.status, str(exc), exc.error_type) from exc
        try:
            if req.stream:
                return await self._stream(request, job, seq, admitted)
            await admitted
            return await self._whole(job, seq)
        finally:
            if seq.state is not SeqState.FINISHED:  # cancelled, disconnected or failed
                driver.abort(seq, job.emitted)

    async def _whole(self, job: _Job, seq: Seq) -> web.Response:
        driver = self.s.driver
        await driver.wait_first_token(seq)
        await driver.clock.sleep(driver.decode_time(seq))
        job.emitted = job.n_out
        body = completion_body(
            chat=job.req.chat,
            request_id=job.request_id,
            created=int(time.time()),
            model=job.req.model,
            text=output_text(job.counter, job.n_out),
            finish_reason=job.reason,
            usage_=usage(seq.prompt_tokens, job.n_out, seq.cached_tokens),
        )
        driver.finish(seq, job.reason, job.n_out)
        return web.Response(body=body, content_type=_JSON)

    async def _stream(
        self, request: web.Request, job: _Job, seq: Seq, admitted: asyncio.Future[None]
    ) -> web.StreamResponse:
        """Headers go out at once (as vLLM's streaming response does), frames once admitted."""
        driver, req = self.s.driver, job.req
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        renderer = StreamRenderer(chat=req.chat, request_id=job.request_id, created=int(time.time()),
                                  model=req.model, offset=job.counter)  # fmt: skip
        try:
            await resp.prepare(request)
            await admitted
            head = renderer.first()
            async for count in driver.pace(seq):
                frames = renderer.tokens(job.emitted, count, job.n_out, job.reason)
                job.emitted += count
                if head:
                    frames, head = head + frames, b""
                await resp.write(frames)
            tail = b""
            if req.include_usage:
                tail = renderer.usage_frame(usage(seq.prompt_tokens, job.n_out, seq.cached_tokens))
            driver.finish(seq, job.reason, job.n_out)
            await resp.write(tail + DONE)
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client went away; the caller aborts the sequence if it was still running
        return resp

    async def embeddings(self, request: web.Request) -> web.Response:
        self._check_faults(request)
        body = parse_json(await request.read())
        model = require_model(body)
        lora = self._resolve(model)
        if "input" not in body:
            raise ApiError(400, "'input' is required", param="input")
        inputs = prompt_token_lists(body["input"], self.s.tokenizer, "input")
        dims = body.get("dimensions", 64)
        if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= 8192:
            raise ApiError(400, f"'dimensions' must be an integer 1-8192, got {dims!r}", param="dimensions")
        all_ids = [t for ids in inputs for t in ids]
        request_id, _ = self._next_id("embd")
        driver = self.s.driver
        try:
            seq = await driver.admit(request_id, all_ids, 0, lora)
        except EngineError as exc:
            raise ApiError(exc.status, str(exc), exc.error_type) from exc
        try:
            await driver.wait_first_token(seq)
        except BaseException:
            driver.abort(seq)
            raise
        driver.finish(seq, "stop", 0)
        data = [{"object": "embedding", "index": i, "embedding": embedding_vector(ids, dims)}
                for i, ids in enumerate(inputs)]  # fmt: skip
        n = len(all_ids)
        return _json({"id": request_id, "object": "list", "created": int(time.time()), "model": model,
                      "data": data, "usage": {"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0,
                                              "prompt_tokens_details": None}})  # fmt: skip

    # -- tokenisation -------------------------------------------------------------------------------
    async def render_completions(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        self._resolve(require_model(body))
        if "prompt" not in body:
            raise ApiError(400, "'prompt' is required", param="prompt")
        lists = prompt_token_lists(body["prompt"], self.s.tokenizer)
        return _json([{"token_ids": ids} for ids in lists])

    async def render_chat(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        self._resolve(require_model(body))
        return _json({"token_ids": chat_token_ids(body, self.s.tokenizer)})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        if "model" in body:
            self._resolve(require_model(body))
        if "messages" in body:
            ids = chat_token_ids(body, self.s.tokenizer)
        elif "prompt" in body:
            ids = [t for part in prompt_token_lists(body["prompt"], self.s.tokenizer) for t in part]
        else:
            raise ApiError(400, "either 'prompt' or 'messages' is required", param="prompt")
        return _json({"count": len(ids), "max_model_len": self.s.config.effective_max_model_len,
                      "tokens": ids, "token_strs": None})  # fmt: skip

    # -- LoRA and models ----------------------------------------------------------------------------
    async def load_lora(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise ApiError(400, "'lora_name' and 'lora_path' must be non-empty strings", param="lora_name")
        if name in self.s.config.served_names:
            raise ApiError(
                400, f"The lora adapter '{name}' has the name of the base model.", param="lora_name"
            )
        if not self.s.engine.lora.register(name, path):
            raise ApiError(400, f"The lora adapter '{name}' has already been loaded.", param="lora_name")
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_lora(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "'lora_name' must be a non-empty string", param="lora_name")
        lora = self.s.engine.lora
        if not lora.is_registered(name):
            raise ApiError(404, f"The lora adapter '{name}' cannot be found.", param="lora_name")
        if not lora.unregister(name):
            raise ApiError(
                400, f"The lora adapter '{name}' is in use by running requests.", param="lora_name"
            )
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def models(self, request: web.Request) -> web.Response:
        cfg, created = self.s.config, self.s.created
        max_len = cfg.effective_max_model_len

        def card(model_id: str, root: str, parent: str | None) -> dict[str, Any]:
            return {"id": model_id, "object": "model", "created": created, "owned_by": "vllm", "root": root,
                    "parent": parent, "max_model_len": max_len, "permission": []}  # fmt: skip

        data = [card(name, cfg.model, None) for name in cfg.served_names]
        data += [
            card(name, path, cfg.metric_model_name) for name, path in self.s.engine.lora.registered.items()
        ]
        return _json({"object": "list", "data": data})
