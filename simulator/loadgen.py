"""Async load generator: sends a :class:`~simulator.workloads.Workload` and measures every request.

Two modes: ``arrival`` sends each request at its arrival offset (open loop: a slow server does not
slow the offered load down), ``concurrency`` keeps ``concurrency`` requests in flight (closed loop;
a session's next turn is sent only after its previous turn finished, as a chat client does).
Both stop at ``time_limit_s`` (requests not yet sent are not sent; those in flight are cancelled and
recorded as errors) so a run is bounded in time as well as in requests.

Per request (:class:`RequestResult`, one JSON line each in ``jsonl``): TTFT from sending to the
first streamed *content* token (the first SSE frame carrying non-empty text), inter-token latencies
between content frames, end-to-end latency, status, error text, output/prompt/cached tokens from the
usage chunk or body, and ``x-inference-port`` (which server answered). Each request carries the
run's ``headers`` and its own (``RequestSpec.headers``, e.g. per-request SLOs). Non-streamed requests have
TTFT = e2e. A live progress line goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import aiohttp
import orjson

from simulator.workloads import RequestSpec, Workload, percentile

__all__ = ["LoadOptions", "RequestResult", "run_load"]


@dataclass(slots=True)
class RequestResult:
    index: int
    group: str
    sent_at: float  # seconds since the start of the run
    status: int = 0
    error: str = ""
    ttft: float | None = None
    e2e: float | None = None
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    server: str = ""  # x-inference-port of the answering server
    chunks: int = 0

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.error


@dataclass(frozen=True, slots=True)
class LoadOptions:
    base_url: str
    mode: str = "arrival"  # arrival | concurrency
    concurrency: int = 16
    time_limit_s: float = 300.0
    request_timeout_s: float = 120.0
    headers: tuple[tuple[str, str], ...] = ()
    progress: bool = True


def _content_of(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or ()
    if not choices:
        return ""
    c0 = choices[0]
    if "text" in c0:
        return str(c0.get("text") or "")
    delta = c0.get("delta") or {}
    return str(delta.get("content") or "")


def _usage_into(res: RequestResult, usage: dict[str, Any] | None) -> None:
    if not usage:
        return
    res.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    res.output_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details") or {}
    res.cached_tokens = int(details.get("cached_tokens") or 0)


def _headers(opts: LoadOptions, spec: RequestSpec) -> dict[str, str]:
    # vllm-router (like vLLM) rejects a JSON body without this content type (415). A request's own
    # headers (RequestSpec.headers) override the run's.
    return {"content-type": "application/json", **dict(opts.headers), **dict(spec.headers)}


async def _one(
    session: aiohttp.ClientSession, opts: LoadOptions, spec: RequestSpec, t0: float
) -> RequestResult:
    start = time.perf_counter()
    res = RequestResult(index=spec.index, group=spec.group, sent_at=start - t0)
    stream = bool(spec.body.get("stream"))
    last = start
    try:
        async with session.post(
            opts.base_url + spec.path, data=orjson.dumps(spec.body), headers=_headers(opts, spec)
        ) as resp:
            res.status = resp.status
            res.server = resp.headers.get("x-inference-port", "")
            if resp.status >= 300:
                res.error = (await resp.text())[:300]
                res.e2e = time.perf_counter() - start
                return res
            if not stream:
                body = orjson.loads(await resp.read())
                res.ttft = res.e2e = time.perf_counter() - start
                _usage_into(res, body.get("usage"))
                return res
            buf = b""
            async for piece in resp.content.iter_any():
                buf += piece
                while b"\n\n" in buf:
                    frame, buf = buf.split(b"\n\n", 1)
                    if not frame.startswith(b"data: "):
                        continue
                    data = frame[6:]
                    if data == b"[DONE]":
                        continue
                    chunk = orjson.loads(data)
                    res.chunks += 1
                    if chunk.get("usage"):
                        _usage_into(res, chunk["usage"])
                    if _content_of(chunk):
                        now = time.perf_counter()
                        if res.ttft is None:
                            res.ttft = now - start
                        else:
                            res.itl.append(now - last)
                        last = now
            res.e2e = time.perf_counter() - start
    except asyncio.CancelledError:
        res.error = "cancelled at the time limit"
        res.e2e = time.perf_counter() - start
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:300]
        res.e2e = time.perf_counter() - start
    return res


class _Progress:
    def __init__(self, total: int, enabled: bool, out: TextIO = sys.stderr) -> None:
        self.total, self.enabled, self.out = total, enabled, out
        self.done = self.errors = 0
        self.ttfts: list[float] = []
        self._last = 0.0
        self._tty = out.isatty()

    def add(self, r: RequestResult) -> None:
        self.done += 1
        if not r.ok:
            self.errors += 1
        elif r.ttft is not None:
            self.ttfts.append(r.ttft)
        self.show()

    def show(self, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and now - self._last < (0.25 if self._tty else 5.0):
            return
        self._last = now
        width = 30
        filled = int(width * self.done / max(1, self.total))
        p50 = percentile(self.ttfts[-200:], 50) * 1000 if self.ttfts else float("nan")
        line = (
            f"[{'#' * filled}{'-' * (width - filled)}] {self.done}/{self.total} "
            f"errors={self.errors} ttft_p50(recent)={p50:.0f}ms"
        )
        if self._tty:
            self.out.write("\r" + line + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()


async def run_load(
    workload: Workload | Sequence[RequestSpec], opts: LoadOptions, jsonl: Path | None = None
) -> list[RequestResult]:
    """Run ``workload`` against ``opts.base_url``; return one result per request sent."""
    specs = list(workload.requests if isinstance(workload, Workload) else workload)
    progress = _Progress(len(specs), opts.progress)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=opts.request_timeout_s)
    results: list[RequestResult] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t0 = time.perf_counter()
        deadline = t0 + opts.time_limit_s

        async def run(spec: RequestSpec) -> None:
            r = await _one(session, opts, spec, t0)
            results.append(r)
            progress.add(r)

        tasks: list[asyncio.Task[None]] = []
        try:
            if opts.mode == "concurrency":
                queue: asyncio.Queue[RequestSpec] = asyncio.Queue()
                for s in specs:
                    queue.put_nowait(s)

                # A conversation's next turn resends its history: it is sent only after the previous
                # turn of the same session finished (a real chat client waits for the answer).
                turn_done: dict[str, asyncio.Event] = {}

                async def worker() -> None:
                    while not queue.empty() and time.perf_counter() < deadline:
                        spec = queue.get_nowait()
                        previous = turn_done.get(spec.session) if spec.session else None
                        done = asyncio.Event()
                        if spec.session:
                            turn_done[spec.session] = done
                        try:
                            if previous is not None:
                                await previous.wait()
                            await run(spec)
                        finally:
                            done.set()

                tasks = [asyncio.create_task(worker()) for _ in range(max(1, opts.concurrency))]
            elif opts.mode == "arrival":
                for spec in specs:
                    delay = t0 + spec.at - time.perf_counter()
                    if time.perf_counter() + max(delay, 0) >= deadline:
                        break
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(run(spec)))
            else:
                raise ValueError(f"mode must be 'arrival' or 'concurrency', got {opts.mode!r}")
            if tasks:
                _done, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.perf_counter()))
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
        except BaseException:  # cancelled (Ctrl-C) or failed: stop the requests, retrieve their outcome
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    progress.show(final=True)
    results.sort(key=lambda r: r.index)
    if jsonl is not None:
        jsonl.parent.mkdir(parents=True, exist_ok=True)
        with jsonl.open("w") as f:
            for r in results:
                f.write(json.dumps(asdict(r)) + "\n")
    return results
