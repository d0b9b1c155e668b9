"""In-process CPU cost of one ext_proc request (not a test): no sockets, no event-loop wake-ups, no scraping.

Builds the picker exactly as ``epp`` does (:func:`epp.app.build_app`, default configuration) but serves a
fixed snapshot of ``--endpoints`` endpoints, and feeds an :class:`~epp.server.h2.connection.H2Connection`
(``--engine ngh2``: an :class:`~epp.server.ngh2.connection.NgH2Connection`) on a fake transport the bytes
of what Envoy 1.40 sends with the GIE configuration for a 1 KB completion (:func:`envoy_messages`: request
headers, body, empty end of body, response headers, body, empty end of body, half-close; six messages as
``epp-bench extproc-envoy`` counts); ``--concurrency`` streams per
batch. Prints the process CPU microseconds per request (min and median of 5 rounds). Deterministic
enough (±3%) for A/B comparisons of the Python on the request path; add the socket and loop cost with
``loop_bench.py`` or ``epp-bench extproc-envoy``.

    .venv/bin/python tests/epp/server/inproc_bench.py --requests 3200
    PYTHONPATH=/path/to/other/checkout .venv/bin/python tests/epp/server/inproc_bench.py   # A/B
    .venv/bin/python tests/epp/server/inproc_bench.py --profile tottime                   # cProfile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import hpack
import orjson

sys.path.insert(0, os.path.dirname(__file__))
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import ProcessingRequest
from srv_helpers import request_body, request_headers, response_body, response_headers

from epp.app import build_app
from epp.config.options import parse_options
from epp.server.h2 import frames as f
from epp.server.h2.connection import H2Connection
from epp.server.logs import configure_logging
from epp.server.ngh2 import NgH2Connection
from scheduler.types import Endpoint, EndpointView, Metrics


class _Source:
    def __init__(self, endpoints: Sequence[EndpointView]) -> None:
        self.endpoints = tuple(endpoints)

    def snapshot(self) -> Sequence[EndpointView]:
        return self.endpoints


class _Transport:
    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int) -> None:
        pass


def envoy_messages(served: str = "127.0.0.1:54757") -> list[ProcessingRequest]:
    """What Envoy 1.40 sends with the GIE config for one 1 KB completion (captured from a real run):
    headers, body, empty end of body; response headers, body, empty end of body (the last three with
    the served endpoint, ``served``, in ``envoy.lb`` metadata)."""
    prompt = " ".join(f"word{i % 50}" for i in range(120))[:900]
    body = orjson.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": prompt, "ignore_eos": True,
                         "max_tokens": 1})  # fmt: skip
    answer = orjson.dumps({
        "id": "cmpl-58f1147e74974a1e8f55a2a497c0e7b5", "object": "text_completion", "created": 1795338411,
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "choices": [{"index": 0, "text": " brown", "logprobs": None, "finish_reason": "length",
                     "stop_reason": None, "prompt_logprobs": None}],
        "usage": {"prompt_tokens": 120, "total_tokens": 121, "completion_tokens": 1,
                  "prompt_tokens_details": {"cached_tokens": 112}},
    })  # fmt: skip
    head = request_headers(
        {":authority": "127.0.0.1:49469", ":scheme": "http", "content-length": str(len(body)),
         "x-forwarded-proto": "http", "x-request-id": "b39cc77c-6514-4f92-92a1-66936c6a2a7e"},
        body_mode=ProcessingMode.FULL_DUPLEX_STREAMED,
    )  # fmt: skip
    head.metadata_context.SetInParent()
    out = [head, request_body(body, end_of_stream=False), request_body(b"")]
    status = response_headers(200)
    for key, value in (("content-length", str(len(answer))), ("date", "Sun, 22 Nov 2026 09:06:51 GMT"),
                       ("server", "Python/3.11 aiohttp/3.14.5"), ("x-inference-pod", "epp-sim-54757"),
                       ("x-inference-port", "54757"), ("x-envoy-upstream-service-time", "0")):  # fmt: skip
        status.response_headers.headers.headers.add(key=key, raw_value=value.encode())
    out += [status, response_body(answer, end_of_stream=False), response_body(b"")]
    for msg in out[1:3]:
        msg.metadata_context.SetInParent()
    for msg in out[3:]:
        lb = msg.metadata_context.filter_metadata["envoy.lb"]
        lb.fields["x-gateway-destination-endpoint"].string_value = served
    return out


def _grpc(message: object) -> bytes:
    data: bytes = message.SerializeToString()  # type: ignore[attr-defined]
    return b"\0" + len(data).to_bytes(4, "big") + data


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoints", type=int, default=16)
    p.add_argument("--requests", type=int, default=3200)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--profile", default="", help="cProfile the first round, sorted by this key")
    p.add_argument(
        "--engine", choices=("h2", "ngh2"), default="h2", help="ngh2: epp.server.ngh2 (--grpc-engine=ngh2)"
    )
    p.add_argument(
        "--picker-args",
        default="-v 0",
        help="picker flags (default '-v 0'; '-v 2' adds the per-request log line, written to stderr as "
        "the picker writes it: redirect stderr)",
    )
    args = p.parse_args()
    now = time.monotonic()
    endpoints = tuple(
        Endpoint(f"10.0.0.{i}:8000", name=f"pod-{i}",
                 metrics=Metrics(updated_at=now, waiting_queue_size=i % 3, kv_cache_usage=0.1 * (i % 5)))
        for i in range(args.endpoints)
    )  # fmt: skip
    options = parse_options([
        "--endpoints", ",".join(e.address for e in endpoints), "--secure-serving=false",
        *shlex.split(args.picker_args),
    ])  # fmt: skip
    configure_logging(options.verbosity, options.log_format, time_encoding=options.zap_time_encoding)
    app = await build_app(options)
    core = app.server.core
    core.router._source = _Source(endpoints)  # the data layer is never started
    conn: Any = (NgH2Connection if args.engine == "ngh2" else H2Connection)(core, 1 << 24)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    conn.data_received(f.PREFACE + f.settings({0x4: 2**31 - 1}) + f.frame(f.SETTINGS, f.ACK, 0))
    encoder = hpack.Encoder()  # Envoy's request headers: literals once, then one-byte indexed fields
    grpc_headers = [(":method", "POST"), (":scheme", "http"), (":authority", "epp"),
                    (":path", "/envoy.service.ext_proc.v3.ExternalProcessor/Process"),
                    ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip
    # Envoy reports the endpoint that served, which is the one the picker chose: every request of this
    # bench has the same prompt, so the endpoint the warm-up's requests went to serves the rest too
    msgs = [_grpc(m) for m in envoy_messages(endpoints[0].address)]
    next_sid = 1

    def reads(batches: int) -> list[list[bytes]]:
        """What Envoy's socket reads would carry for ``batches`` x ``--concurrency`` new streams (built
        before the clock starts, so the client side's framing is not counted)."""
        nonlocal next_sid
        out = []
        for _ in range(batches):
            sids = range(next_sid, next_sid + 2 * args.concurrency, 2)
            next_sid += 2 * args.concurrency
            out.append([
                b"".join(f.frame(f.HEADERS, f.END_HEADERS, s, encoder.encode(grpc_headers))
                         + f.frame(f.DATA, 0, s, msgs[0])
                         + f.frame(f.DATA, 0, s, msgs[1]) + f.frame(f.DATA, 0, s, msgs[2]) for s in sids),
                b"".join(f.frame(f.DATA, 0, s, msgs[3]) for s in sids),
                b"".join(f.frame(f.DATA, 0, s, msgs[4]) + f.frame(f.DATA, 0, s, msgs[5]) for s in sids),
                b"".join(f.frame(f.DATA, f.END_STREAM, s, b"") for s in sids),
                f.window_update(0, 1 << 20),
            ])  # fmt: skip
        return out

    def feed(batches: list[list[bytes]]) -> int:
        for batch in batches:
            for data in batch:
                conn.data_received(data)
        return len(batches) * int(args.concurrency)

    feed(reads(4))
    picked = Counter(row["endpoints"][0] for row in app.server.decisions.last(256) if row["endpoints"])
    msgs = [_grpc(m) for m in envoy_messages(picked.most_common(1)[0][0])]
    feed(reads(16))
    rounds: list[float] = []
    for round_ in range(5):
        batches = reads(-(-args.requests // args.concurrency))
        profiler = cProfile.Profile() if args.profile and round_ == 0 else None
        if profiler is not None:
            profiler.enable()
        t0 = time.process_time()
        n = feed(batches)
        seconds = time.process_time() - t0
        if profiler is not None:
            profiler.disable()
            pstats.Stats(profiler).sort_stats(args.profile).print_stats(40)
        else:
            rounds.append(seconds / n * 1e6)
    if conn.open_streams:
        raise RuntimeError(f"{conn.open_streams} streams did not finish")
    rounds.sort()
    print(
        f"engine={args.engine} endpoints={args.endpoints} concurrency={args.concurrency} "
        f"requests/round={args.requests} "
        f"cpu_per_request min={rounds[0]:.1f}us median={rounds[len(rounds) // 2]:.1f}us"
    )


if __name__ == "__main__":
    asyncio.run(main())
