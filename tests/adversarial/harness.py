"""The adversarial suite's fixtures: a real ``epp`` process, a fake model server, a well-behaved client.

* :func:`start_picker` runs ``python -m epp`` (plaintext, 127.0.0.1, ports from the OS) against one fake
  vLLM server (:class:`ModelServer`, a thread answering ``/metrics``), waits until it is ready and records
  its resident memory after a warm-up (the baseline).
* :class:`GoodClient` is a well-behaved ext_proc client on its own connection (grpcio, in a thread):
  full request/response exchanges in a loop, each checked (routed to the model server, ``grpc-status``
  0); it counts errors and keeps latencies for the p99.
* :func:`peak_rss` reads the picker's peak resident memory (``VmHWM``), :func:`rss` the current one.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import orjson
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.service.ext_proc.v3.external_processor_pb2 import HttpBody, HttpHeaders, ProcessingRequest
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = [
    "GoodClient",
    "ModelServer",
    "Picker",
    "peak_rss",
    "request_messages",
    "reset_peak",
    "rss",
    "start_picker",
]

MIB = 1 << 20
METRICS = b"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m1"} 0
vllm:num_requests_running{model_name="m1"} 1
vllm:kv_cache_usage_perc{model_name="m1"} 0.25
"""
BODY = orjson.dumps({"model": "m1", "prompt": "tell me a story " * 60})  # ~1 KB


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ModelServer:
    """A fake vLLM server answering ``/metrics`` and ``/v1/models`` on 127.0.0.1, in a thread."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = METRICS if self.path.startswith("/metrics") else b'{"object":"list","data":[]}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{key} not in /proc/{pid}/status")


def rss(pid: int) -> int:
    """Resident memory now, bytes."""
    return _status_kib(pid, "VmRSS") * 1024


def reset_peak(pid: int) -> None:
    """Reset ``VmHWM`` to the current resident size (Linux ``clear_refs`` value 5)."""
    with open(f"/proc/{pid}/clear_refs", "w") as fh:
        fh.write("5")


def peak_rss(pid: int) -> int:
    """Peak resident memory since the process started (``VmHWM``), bytes."""
    return _status_kib(pid, "VmHWM") * 1024


def request_messages(body: bytes = BODY) -> list[ProcessingRequest]:
    """A complete ext_proc exchange as Envoy sends it: request headers and body, response headers and
    body (end of stream)."""

    def headers(pairs: dict[str, str]) -> HttpHeaders:
        values = [HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
        return HttpHeaders(headers=HeaderMap(headers=values))

    return [
        ProcessingRequest(
            request_headers=headers(
                {":method": "POST", ":path": "/v1/completions", "content-type": "application/json"}
            )
        ),
        ProcessingRequest(request_body=HttpBody(body=body, end_of_stream=True)),
        ProcessingRequest(response_headers=headers({":status": "200", "content-type": "application/json"})),
        ProcessingRequest(response_body=HttpBody(body=b"{}", end_of_stream=True)),
    ]


@dataclass
class Picker:
    proc: subprocess.Popen[bytes]
    port: int
    health_port: int
    engine: str
    baseline: int = 0  # resident bytes after warm-up

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def _ready(health_port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{health_port}") as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
        except grpc.RpcError:
            return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)


@contextlib.contextmanager
def start_picker(engine: str, *extra: str) -> Iterator[Picker]:
    """A real picker process on ``engine``, ready and warmed up; killed on exit."""
    server = ModelServer()
    port, health = free_port(), free_port()
    args = [
        sys.executable, "-m", "epp", "--endpoints", server.address, "--host", "127.0.0.1",
        "--grpc-port", str(port), "--grpc-health-port", str(health), "--metrics-port", str(free_port()),
        "--secure-serving=false", "--grpc-engine", engine, "-v", "0", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
    picker = Picker(proc, port, health, engine)
    try:
        deadline = time.monotonic() + 30
        while not _ready(health):
            assert picker.alive, f"the {engine} picker exited with status {proc.returncode}"
            assert time.monotonic() < deadline, f"the {engine} picker never became ready"
            time.sleep(0.1)
        with GoodClient(port) as warm:  # warm-up: imports, caches, first connections
            warm.wait_for(50)
        assert warm.errors == [], warm.errors
        picker.baseline = rss(proc.pid)
        yield picker
    finally:
        proc.kill()
        proc.wait()
        server.close()


@dataclass
class GoodClient:
    """Well-behaved exchanges on one connection in a thread while an attack runs; see the module doc."""

    port: int
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> GoodClient:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    def wait_for(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.latencies) + len(self.errors) < n and time.monotonic() < deadline:
            time.sleep(0.01)

    @property
    def p99_ms(self) -> float:
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(len(data) * 0.99))] * 1000 if data else float("nan")

    def _run(self) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
            process = pb_grpc.ExternalProcessorStub(ch).Process
            while not self._stop.is_set():
                t0 = time.perf_counter()
                try:
                    answers = list(process(iter(request_messages()), timeout=10))
                except grpc.RpcError as exc:
                    self.errors.append(f"{exc.code()}: {exc.details()}")
                    time.sleep(0.05)
                    continue
                routed = answers[0].SerializeToString() if answers else b""
                if len(answers) < 2 or b"x-gateway-destination-endpoint" not in routed:
                    self.errors.append(f"unexpected answers: {answers!r:.300}")
                else:
                    self.latencies.append(time.perf_counter() - t0)
                time.sleep(0.005)
