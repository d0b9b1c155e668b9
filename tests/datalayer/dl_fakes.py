"""Test doubles for the data layer: an in-memory HTTP client, a manual clock, vLLM metrics text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from datalayer.http import FetchError, HttpResponse

Handler = Callable[[], HttpResponse]


class FakeHttp:
    """``HttpClient`` answering from ``routes[url]`` (a response, an exception to raise, or a callable)."""

    def __init__(self) -> None:
        self.routes: dict[str, HttpResponse | Exception | Handler] = {}
        self.calls: list[str] = []
        self.closed = False

    def set(self, url: str, answer: HttpResponse | Exception | Handler) -> None:
        self.routes[url] = answer

    async def get(self, url: str, *, timeout: float, max_bytes: int) -> HttpResponse:
        self.calls.append(url)
        answer = self.routes.get(url)
        if answer is None:
            raise FetchError("connection refused")
        if isinstance(answer, Exception):
            raise answer
        resp = answer() if callable(answer) else answer
        if len(resp.body) > max_bytes:
            raise FetchError(f"response body larger than {max_bytes} bytes")
        return resp

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class ManualClock:
    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def vllm_text(
    waiting: int = 0,
    running: int = 0,
    kv: float = 0.0,
    *,
    kv_name: str = "vllm:kv_cache_usage_perc",
    lora: list[tuple[float, int, str, str]] | None = None,
    block_size: int | None = 16,
    num_blocks: int | None = 1024,
    model: str = "m",
) -> str:
    """A vLLM-like /metrics body; ``lora`` entries are (value, max_lora, running, waiting)."""
    lines = [
        "# HELP vllm:num_requests_waiting Number of requests waiting.",
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{model_name="{model}"}} {float(waiting)}',
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{model_name="{model}"}} {float(running)}',
        f"# TYPE {kv_name} gauge",
        f'{kv_name}{{model_name="{model}"}} {kv}',
        "# TYPE vllm:e2e_request_latency_seconds histogram",
        f'vllm:e2e_request_latency_seconds_bucket{{model_name="{model}",le="0.5"}} 3.0',
        f'vllm:e2e_request_latency_seconds_bucket{{model_name="{model}",le="+Inf"}} 4.0',
        f'vllm:e2e_request_latency_seconds_sum{{model_name="{model}"}} 2.5',
        f'vllm:e2e_request_latency_seconds_count{{model_name="{model}"}} 4.0',
    ]
    if block_size is not None:
        lines.append(
            f'vllm:cache_config_info{{block_size="{block_size}",num_gpu_blocks="{num_blocks}",'
            'enable_prefix_caching="True"} 1.0'
        )
    for value, max_lora, run, wait in lora or []:
        lines.append(
            f'vllm:lora_requests_info{{max_lora="{max_lora}",running_lora_adapters="{run}",'
            f'waiting_lora_adapters="{wait}"}} {value}'
        )
    return "\n".join(lines) + "\n"


def ok(text: str | bytes, status: int = 200) -> HttpResponse:
    return HttpResponse(status, text.encode() if isinstance(text, str) else text)
