"""Shared helpers of the deploy tests: the Python 3.12 interpreter, free ports, bounded process stops,
a fake model server.

``python312()`` finds CPython 3.12 (what the image's ``python:3.12-slim`` base and helm-sdkpy need): the
``PYEPP_PYTHON312`` environment variable, else ``$(pyenv root)/versions/3.12.*/bin/python3``. The pyenv
``python3.12`` shim is not used: it refuses to run outside a pyenv-selected directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["ModelServer", "free_port", "model_server", "python312", "stop"]

METRICS = b"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
"""
MODELS = b'{"object":"list","data":[{"id":"m","object":"model","root":"m","parent":null}]}'


def python312() -> Path:
    explicit = os.environ.get("PYEPP_PYTHON312")
    if explicit:
        return Path(explicit)
    roots: list[Path] = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        out = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=10, check=False)
        if out.returncode == 0 and out.stdout.strip():
            roots.append(Path(out.stdout.strip()))
    roots.append(Path.home() / ".pyenv")
    for root in roots:
        for candidate in sorted((root / "versions").glob("3.12.*/bin/python3"), reverse=True):
            if candidate.is_file():
                return candidate
    raise RuntimeError("CPython 3.12 not found: install it with pyenv or set PYEPP_PYTHON312=/path/python3")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    return int(proc.returncode)


class ModelServer:
    """A vLLM stand-in on 127.0.0.1: ``GET /metrics``, ``GET /v1/models`` and ``POST /v1/completions``
    (answers a fixed completion naming ``name``); ``completions`` counts the POSTs it served."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.completions = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                routes = {"/metrics": (METRICS, "text/plain"), "/v1/models": (MODELS, "application/json")}
                body, ctype = routes.get(self.path, (b"not found", "text/plain"))
                self._send(200 if self.path in routes else 404, body, ctype)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with outer._lock:
                    outer.completions += 1
                body = {
                    "object": "text_completion",
                    "model": "m",
                    "choices": [{"index": 0, "text": outer.name, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                }
                self._send(200, json.dumps(body).encode(), "application/json")

            def log_message(self, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def model_server(name: str = "model-server") -> Iterator[ModelServer]:
    server = ModelServer(name)
    server.start()
    try:
        yield server
    finally:
        server.close()
