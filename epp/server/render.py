"""The async pre-scheduling step: vLLM ``/render`` calls for ``token-producer``'s ``vllm`` backend, and
the in-process tokenizer of ``precise-prefix-cache-*`` (``indexerConfig.tokenizersPoolConfig``).

Scheduler plugins do no I/O, so a ``token-producer`` configured with ``vllm`` (or ``modelName``) has
its prompt tokenized here, before the request is scheduled; the ids are handed to the plugin
(:meth:`~scheduler.plugins.tokens.producer.TokenProducer.accept_rendered`). Only configurations with
such a producer build a :class:`TokenRenderer`; without one, streams never wait (the step is off the
hot path).

Per request and producer, as upstream's ``vllmHTTPRenderer``:

* chat completions: ``POST {url}/v1/chat/completions/render`` with the request's JSON body, its
  ``model`` replaced by ``modelName``; answer ``{"token_ids": [...]}``. Timeout ``mmTimeout`` when a
  message's ``content`` is a non-empty list (multimodal parts), else ``timeout``;
* completions: ``POST {url}/v1/completions/render`` likewise (timeout ``timeout``); answer a list of
  ``{"token_ids": [...]}``, one per prompt (several prompts: their ids concatenated, as pyepp's prompt
  text joins them). A prompt given as token ids is taken as is, without a call;
* other request kinds: no ids (upstream: "unsupported request body type").

Failure (connection error, timeout, status outside 2xx, an answer over ``max_response_bytes`` or not of
that shape): a warning with the request id and the reason, and no ids for the request — the request
is still scheduled, as upstream's director logs a producer error and goes on.

Bounds: at most ``max_concurrency`` renders in flight per renderer (further requests wait for a slot
within their own timeout), ``max_connections`` pooled HTTP/1.1 connections per producer, answers read
up to ``max_response_bytes`` (16 MiB: a 1M-token prompt), the request body is the client's (already
bounded by the session's body limit).

In-process tokenizer (:mod:`scheduler.plugins.precise.local_tokenizer`): the request's JSON body
(completions ``prompt``, chat ``messages``) is tokenised in a thread pool of ``workersCount`` threads
(the largest among such producers), so a long prompt whose prefix is not cached yet (about 9 ms for
8,000 tokens on the 2-core development machine) never holds up other streams; the Rust tokenizer
releases the GIL while it works. At most ``max_concurrency`` tokenisations are queued or running; the ids
are handed over with :meth:`~scheduler.plugins.precise.producer.PrecisePrefixCacheProducer.accept_tokens`.
Only the first ``maxPrefixBlocksToMatch`` blocks' worth of ids is computed.

Cost: the calls go through aiohttp's client (0.27 ms of picker CPU per call for a 2,000-word prompt,
where httpx took 1.05 ms); the answer's ids are checked in C (:func:`_all_ids`). The session of each
producer is opened on the first call (on the serving loop) and closed by :meth:`TokenRenderer.aclose`.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import orjson
import structlog

from scheduler.plugins.precise.producer import PrecisePrefixCacheProducer
from scheduler.plugins.tokens.params import RenderBackend
from scheduler.plugins.tokens.producer import TokenProducer
from scheduler.types import ApiKind, LLMRequest

__all__ = ["CHAT_RENDER_PATH", "COMPLETIONS_RENDER_PATH", "RenderError", "TokenRenderer", "token_renderer"]

CHAT_RENDER_PATH = "/v1/chat/completions/render"
COMPLETIONS_RENDER_PATH = "/v1/completions/render"
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
_log = structlog.get_logger("epp.render")
_NO_TIMEOUT = aiohttp.ClientTimeout(total=None)  # each call is bounded by its own timeout (asyncio.timeout)
_U32 = next(code for code in "ILH" if array(code).itemsize == 4)  # an unsigned 32-bit array type code


class RenderError(Exception):
    """A render call failed (the message says why)."""


def token_renderer(plugins: Sequence[object]) -> TokenRenderer | None:
    """A renderer for the ``vllm``-backed token producers among ``plugins`` (None: there are none)."""
    producers = [p for p in plugins if isinstance(p, TokenProducer) and p.render is not None]
    local = [p for p in plugins if isinstance(p, PrecisePrefixCacheProducer) and p.local is not None]
    for p in local:
        assert p.local is not None
        _log.info(
            "in-process tokenizer loaded",
            plugin=p.name,
            tokenizer=str(p.local.path),
            chat_template=p.local.template is not None,
            prefix_cache=p.local.chunked,
            cut=p.local.mode or None,  # words (at whitespace), bytes / metaspace (before " word")
            uncached_because=p.local.unchunked_reason or None,
        )
    return TokenRenderer(producers, local_producers=local) if producers or local else None


class TokenRenderer:
    """Calls each ``vllm``-backed producer's render endpoint for a request and hands over the ids."""

    def __init__(
        self,
        producers: Sequence[TokenProducer],
        *,
        max_concurrency: int = 256,
        max_connections: int = 64,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        local_producers: Sequence[PrecisePrefixCacheProducer] = (),
    ) -> None:
        self._producers = tuple(producers)
        self._local = tuple(local_producers)
        workers = max((p.settings.tokenizer.workers for p in self._local if p.settings.tokenizer), default=0)
        self._executor = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="epp-tokenize") if workers else None
        )
        self._slots = asyncio.Semaphore(max_concurrency)
        self._max_bytes = max_response_bytes
        self._max_connections = max_connections
        self._clients: dict[str, aiohttp.ClientSession] = {}

    def _client(self, name: str) -> aiohttp.ClientSession:
        client = self._clients.get(name)
        if client is None or client.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, limit_per_host=self._max_connections
            )
            client = self._clients[name] = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, trust_env=False, timeout=_NO_TIMEOUT
            )
        return client

    def wants(self, request: LLMRequest) -> bool:
        """Whether ``request`` is rendered (a chat or completions request with a body)."""
        return request.api in (ApiKind.CHAT_COMPLETIONS, ApiKind.COMPLETIONS)

    async def render(self, request: LLMRequest, body: bytes) -> None:
        """Render ``request`` for every producer and hand each its ids (None on failure). Never raises.
        The body is parsed once here for all of them."""
        try:
            payload: Any = orjson.loads(body)
            invalid = "" if isinstance(payload, dict) else "request body is not a JSON object"
        except orjson.JSONDecodeError as exc:
            payload, invalid = None, f"request body is not JSON: {exc}"
        for producer in self._producers:
            backend = producer.render
            assert backend is not None
            try:
                if invalid:
                    raise RenderError(invalid)
                ids = await self._render_one(self._client(producer.name), backend, request, payload)
            except RenderError as exc:
                _log.warning(
                    "token-producer render failed; scheduling without token ids",
                    request_id=request.request_id,
                    plugin=producer.name,
                    error=str(exc),
                )
                ids = None
            producer.accept_rendered(request.request_id, ids)
        if self._local:
            await self._tokenize(request, payload)

    async def _tokenize(self, request: LLMRequest, payload: Any) -> None:
        """Tokenise ``request`` in process for every such producer (in the thread pool). Never raises."""
        chat = request.api is ApiKind.CHAT_COMPLETIONS
        loop = asyncio.get_running_loop()
        for producer in self._local:
            tokenizer = producer.local
            assert tokenizer is not None
            ids: list[int] | None = None
            if isinstance(payload, dict):
                try:
                    async with self._slots:
                        ids = await loop.run_in_executor(
                            self._executor, tokenizer.body_ids, chat, payload, producer.tokens_limit
                        )
                except Exception as exc:  # a tokenizer error must not fail the request
                    _log.warning(
                        "in-process tokenization failed; scheduling without token ids",
                        request_id=request.request_id,
                        plugin=producer.name,
                        error=f"{type(exc).__name__}: {exc}",
                    )
            producer.accept_tokens(request.request_id, ids)

    async def _render_one(
        self, client: aiohttp.ClientSession, backend: RenderBackend, request: LLMRequest, body: dict[str, Any]
    ) -> list[int] | None:
        chat = request.api is ApiKind.CHAT_COMPLETIONS
        if not chat:
            direct = _token_prompt(body.get("prompt"))
            if direct is not None:
                return direct
        payload = {**body, "model": backend.model}  # `vllm launch render` requires the base model name
        timeout = backend.mm_timeout if chat and _multimodal(payload) else backend.timeout
        path = CHAT_RENDER_PATH if chat else COMPLETIONS_RENDER_PATH
        try:
            async with asyncio.timeout(timeout):
                async with self._slots:
                    answer = await self._post(client, backend.url + path, orjson.dumps(payload))
        except TimeoutError:
            raise RenderError(f"POST {path}: no answer within {timeout:g}s") from None
        return _token_ids(answer, chat)

    async def _post(self, client: aiohttp.ClientSession, url: str, data: bytes) -> Any:
        try:
            async with client.post(url, data=data, headers={"content-type": "application/json"}) as resp:
                ok = 200 <= resp.status < 300
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.content.iter_any():
                    size += len(chunk)
                    if size > self._max_bytes and ok:
                        raise RenderError(f"answer larger than {self._max_bytes} bytes")
                    if size <= 1024 or ok:
                        chunks.append(chunk)
                    else:
                        break  # an error page: 1 KiB of it is enough for the message
                raw = b"".join(chunks)
                if not ok:
                    snippet = raw[:1024].decode(errors="replace")
                    raise RenderError(f"vLLM render returned status {resp.status}: {snippet}")
        except (aiohttp.ClientError, OSError) as exc:
            raise RenderError(f"POST {url}: {type(exc).__name__}: {exc}") from None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RenderError(f"answer is not JSON: {exc}") from None

    async def aclose(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


def _multimodal(payload: dict[str, Any]) -> bool:
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return False
    return any(isinstance(m, dict) and isinstance(m.get("content"), list) and m["content"] for m in messages)


def _token_prompt(prompt: Any) -> list[int] | None:
    """A completions prompt given as token ids (a list of ints), else None."""
    if isinstance(prompt, list) and prompt and _all_ids(prompt):
        return list(prompt)
    return None


def _all_ids(values: list[Any]) -> bool:
    """Every value an int (not a bool) in [0, 2**32). Checked in C: an ``array('I')`` refuses other types
    and out-of-range values, and the set of the values' types must be ``{int}`` (a bool passes the array);
    a few microseconds for thousands of ids, where a Python loop took about a millisecond."""
    try:
        array(_U32, values)
    except (TypeError, OverflowError):
        return False
    return not values or set(map(type, values)) == {int}


def _ids(item: Any) -> list[int]:
    ids = item.get("token_ids") if isinstance(item, dict) else None
    if not isinstance(ids, list) or not _all_ids(ids):
        raise RenderError("answer without a list of token ids")
    return ids


def _token_ids(answer: Any, chat: bool) -> list[int] | None:
    if chat:
        return _ids(answer) or None
    if not isinstance(answer, list) or not answer:
        raise RenderError("vLLM render returned empty response")
    out: list[int] = []
    for item in answer:
        out.extend(_ids(item))
    return out or None
