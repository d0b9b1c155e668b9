"""Micro-benchmark of the sans-I/O ext_proc core (epp.protocol.Session), no gRPC, no network.

Run: ``.venv/bin/python bench/extproc_core_bench.py [--quick]``

Measures CPU time (``time.process_time``, best of several rounds, single thread) of:

* one request through the core: RequestHeaders + RequestBody chunks -> Schedule -> ``scheduled()``
  with a fixed fake result -> all response messages built, for a 1 KB chat body (one chunk) and a
  200 KB chat body (arriving in 16 KiB chunks, returned in 62,000-byte chunks), with and without the
  model-name rewrite (which re-serialises the body); the 1 KB body also with the picker's
  InferenceModelRewrite hook installed and no rules (every request pays its lookup) and with a rule
  splitting the model 3:1 between two targets (lookup, draw, decision counter, body rewrite);
* one streamed response chunk (a ~200-byte vLLM SSE event) through ``receive()``: plain, with the
  model-name rewrite back, and the final chunk carrying usage;

each once for the core alone and once including protobuf (de)serialisation of the messages, which
the gRPC layer performs anyway (``ParseFromString`` of each incoming message and
``SerializeToString`` of each outgoing one).

Then the HTTP/2 engine's message assembly (issue 20): CPU to take one gRPC message of 1, 4 and 16 MiB
arriving in 16 KiB DATA frames (Envoy's frame size) through ``H2Connection.data_received`` up to the
protobuf parse, per MiB; linear assembly keeps the 16 MiB : 1 MiB ratio of the per-MiB cost near 1
(the former ``bytes`` concatenation made it about 35).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import structlog
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpBody,
    HttpHeaders,
    ProcessingRequest,
    ProtocolConfiguration,
)
from prometheus_client import CollectorRegistry

from epp.admission.rewrites import ModelRewrite, ModelRewriter, RewriteRule, RewriteStore, RewriteTarget
from epp.config.flags import ManualHelpFormatter
from epp.protocol import Schedule, Send, Session, SessionConfig
from epp.server.rewrite_metrics import RewriteMetrics
from scheduler.types import Endpoint, SchedulingResult

__all__ = ["main"]

CONFIG = SessionConfig()
RESULT = SchedulingResult(
    primary_profile="default",
    endpoints=(Endpoint("10.0.0.7:8000"), Endpoint("10.0.0.3:8000")),
    profile_results={},
)
ENVOY_CHUNK = 16 * 1024


def _rewrite_config(rules: bool) -> SessionConfig:
    split = RewriteRule(
        ("llama-3-8b",), (RewriteTarget("llama-3-8b-v1", 3), RewriteTarget("llama-3-8b-v2", 1))
    )
    store = RewriteStore([ModelRewrite("canary", (split,))] if rules else [])
    metrics = RewriteMetrics(CollectorRegistry())
    return SessionConfig(model_rewrite=ModelRewriter(store, on_decision=metrics, log_decisions=False))


def _headers(length: int, rewrite: bool) -> ProcessingRequest:
    h = {
        ":method": "POST",
        ":path": "/v1/chat/completions",
        ":authority": "gateway.example",
        ":scheme": "http",
        "content-type": "application/json",
        "content-length": str(length),
        "user-agent": "bench/1.0",
        "x-request-id": "0f6c1c1e-6a8e-4d3c-9d7e-3f1c2b0a9e11",
        "x-forwarded-proto": "http",
        "x-gateway-inference-objective": "standard",
    }
    if rewrite:
        h["x-gateway-model-name-rewrite"] = "llama-3-8b-lora"
    return ProcessingRequest(
        request_headers=HttpHeaders(
            headers=HeaderMap(headers=[HeaderValue(key=k, raw_value=v.encode()) for k, v in h.items()])
        ),
        protocol_config=ProtocolConfiguration(
            request_body_mode=ProcessingMode.FULL_DUPLEX_STREAMED,
            response_body_mode=ProcessingMode.FULL_DUPLEX_STREAMED,
        ),
    )


def chat_body(size: int) -> bytes:
    """A chat-completions body of about ``size`` bytes (several turns of text)."""
    words = ("the quick brown fox jumps over the lazy dog " * (size // 40 + 1))[: max(0, size - 200)]
    turn = len(words) // 4
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    messages += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": words[i * turn : (i + 1) * turn]}
        for i in range(4)
    ]
    return orjson.dumps({"model": "llama-3-8b", "messages": messages, "stream": True, "max_tokens": 256})


def _body_messages(body: bytes) -> list[ProcessingRequest]:
    pieces = [body[i : i + ENVOY_CHUNK] for i in range(0, len(body), ENVOY_CHUNK)]
    return [
        ProcessingRequest(request_body=HttpBody(body=p, end_of_stream=i == len(pieces) - 1))
        for i, p in enumerate(pieces)
    ]


def request_case(size: int, rewrite: bool, wire: bool, config: SessionConfig = CONFIG) -> Callable[[], None]:
    body = chat_body(size)
    incoming = [_headers(len(body), rewrite), *_body_messages(body)]
    raw = [m.SerializeToString() for m in incoming]

    def one() -> None:
        session = Session(config)
        msgs = [ProcessingRequest.FromString(r) for r in raw] if wire else incoming
        actions = []
        for m in msgs:
            actions = session.receive(m)
        assert isinstance(actions[0], Schedule)
        for a in session.scheduled(RESULT):
            if wire and isinstance(a, Send):
                a.response.SerializeToString()

    return one


def chunk_case(kind: str, wire: bool) -> tuple[Callable[[], None], Session]:
    rewrite = kind == "rewrite"
    session = Session(CONFIG)
    body = chat_body(1000)
    session.receive(_headers(len(body), rewrite))
    session.receive(_body_messages(body)[0])
    session.scheduled(RESULT)
    status = HeaderMap(
        headers=[
            HeaderValue(key=":status", raw_value=b"200"),
            HeaderValue(key="content-type", raw_value=b"text/event-stream"),
        ]
    )
    session.receive(ProcessingRequest(response_headers=HttpHeaders(headers=status)))
    model = "llama-3-8b-lora" if rewrite else "llama-3-8b"
    event = {
        "id": "chatcmpl-8f1d2c",
        "object": "chat.completion.chunk",
        "created": 1763790000,
        "model": model,
        "choices": [{"index": 0, "delta": {"content": " token"}, "logprobs": None, "finish_reason": None}],
    }
    if kind == "usage":
        event["usage"] = {"prompt_tokens": 250, "completion_tokens": 256, "total_tokens": 506}
    data = b"data: " + orjson.dumps(event) + b"\n\n"
    msg = ProcessingRequest(response_body=HttpBody(body=data))
    raw = msg.SerializeToString()

    def one() -> None:
        m = ProcessingRequest.FromString(raw) if wire else msg
        for a in session.receive(m):
            if wire and isinstance(a, Send):
                a.response.SerializeToString()

    return one, session


def best_us(fn: Callable[[], None], n: int, rounds: int) -> float:
    """Best per-call CPU time over ``rounds`` rounds of ``n`` calls, in microseconds."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n)
    return best * 1e6


class _NullTransport:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def assembly_ms(core: object, size: int, rounds: int) -> float:
    """Best CPU time (ms) to receive one ``size``-byte gRPC message in 16 KiB DATA frames and parse it
    (a request body before the headers: parsed, then refused, so nothing else runs)."""
    import hpack

    from epp.server.h2 import frames as f
    from epp.server.h2.connection import H2Connection
    from epp.server.h2.limits import H2Limits

    body = ProcessingRequest(request_body=HttpBody(body=b"x" * (size - 16))).SerializeToString()
    message = b"\0" + len(body).to_bytes(4, "big") + body
    headers = hpack.Encoder().encode(
        [
            (":path", "/envoy.service.ext_proc.v3.ExternalProcessor/Process"),
            ("content-type", "application/grpc"),
        ]
    )
    reads = [f.frame(f.HEADERS, f.END_HEADERS, 1, headers)]
    reads += [
        f.frame(f.DATA, 0, 1, message[i : i + ENVOY_CHUNK]) for i in range(0, len(message), ENVOY_CHUNK)
    ]
    best = float("inf")
    for _ in range(rounds):
        conn = H2Connection(core, 64 << 20, limits=H2Limits(connection_budget=64 << 20))  # type: ignore[arg-type]
        conn.connection_made(_NullTransport())  # type: ignore[arg-type]
        conn.data_received(f.PREFACE + f.settings({}) + f.frame(f.SETTINGS, f.ACK, 0))
        t0 = time.process_time()
        for data in reads:
            conn.data_received(data)
        best = min(best, time.process_time() - t0)
        assert conn.open_streams == 0, "the message was not assembled"
    return best * 1e3


def _core() -> object:
    from prometheus_client import CollectorRegistry

    from epp.admission import Admitter
    from epp.server.metrics import RequestMetrics
    from epp.server.routing import Router
    from epp.server.stream import StreamCore

    metrics = RequestMetrics(CollectorRegistry())
    router = Router(None, Admitter(None, lambda: 1.0), None, metrics)  # type: ignore[arg-type]  # never routes
    return StreamCore(CONFIG, router, metrics)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="epp-bench extproc",
        description="ext_proc core micro-benchmark",
        formatter_class=ManualHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    args = parser.parse_args(argv)
    scale = 0.05 if args.quick else 1.0
    rounds = 3 if args.quick else 5
    print(f"python {sys.version.split()[0]}, CPU time per operation (best of {rounds} rounds)")
    print(f"{'case':58s} {'core':>10s} {'core+protobuf':>14s}")
    for size, n in ((1024, 4000), (200 * 1024, 200)):
        for rewrite in (False, True):
            label = f"request {size // 1024} KB chat body{' + model rewrite' if rewrite else ''}"
            iters = max(5, int(n * scale))
            core = best_us(request_case(size, rewrite, False), iters, rounds)
            wire = best_us(request_case(size, rewrite, True), iters, rounds)
            print(f"{label:58s} {core:8.1f}us {wire:12.1f}us")
    for rules in (False, True):
        config = _rewrite_config(rules)
        label = f"request 1 KB chat body, InferenceModelRewrite {'3:1 split' if rules else 'hook, no rules'}"
        iters = max(5, int(4000 * scale))
        core = best_us(request_case(1024, False, False, config), iters, rounds)
        wire = best_us(request_case(1024, False, True, config), iters, rounds)
        print(f"{label:58s} {core:8.1f}us {wire:12.1f}us")
    for kind in ("plain", "rewrite", "usage"):
        iters = max(200, int(50_000 * scale))
        core_fn, _ = chunk_case(kind, False)
        wire_fn, _ = chunk_case(kind, True)
        core = best_us(core_fn, iters, rounds)
        wire = best_us(wire_fn, iters, rounds)
        label = f"streamed response chunk (SSE, ~230 B, {kind})"
        print(f"{label:58s} {core:8.1f}us {wire:12.1f}us")
    print("h2 engine: one gRPC message in 16 KiB DATA frames, assembled and parsed (CPU)")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))  # the refusals
    stream_core, per_mib = _core(), {}
    for mib in (1, 4, 16):
        ms = assembly_ms(stream_core, mib << 20, rounds)
        per_mib[mib] = ms / mib
        print(f"{f'message of {mib} MiB':58s} {ms:8.2f}ms {per_mib[mib]:10.2f}ms/MiB")
    print(f"{'per-MiB cost ratio 16 MiB : 1 MiB (1.0 = linear)':58s} {per_mib[16] / per_mib[1]:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
