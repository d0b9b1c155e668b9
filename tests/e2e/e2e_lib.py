"""Helpers of the end-to-end tests: requests through Envoy, the picker's decisions and metrics."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from devtools.stack import Stack, StackSpec

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def one_slot_flow_control(fairness: str, parameters: str = "") -> StackSpec:
    """The flow-control tests' stack: one simulated server (time scale 1, ``--max-num-seqs 4``) whose
    pool ``concurrency-detector`` (``maxConcurrency: 1``) saturates while one request runs, so further
    requests wait in the picker; ``fairness``: the band's fairness policy (plugin type), declared with
    ``parameters`` (a YAML flow mapping, e.g. ``{lasHalfLifeSeconds: 0}``); TTL 30s."""
    params = f"\n  parameters: {parameters}" if parameters else ""
    config = f"""apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {{maxConcurrency: 1}}
- type: {fairness}{params}
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: queue-scorer}}, {{pluginRef: max-score-picker}}]
flowControl:
  saturationDetector: {{pluginRef: concurrency-detector}}
  defaultRequestTTL: 30s
  defaultPriorityBand: {{fairnessPolicyRef: {fairness}}}
"""
    return StackSpec(
        servers=1,
        sim_args=("--profile", "8b-h100", "--time-scale", "1", "--max-num-seqs", "4"),
        picker_args=("--config-text", config),
    )


@contextmanager
def running(spec: StackSpec) -> Iterator[Stack]:
    """A started stack; on an error while starting or using it the process logs are attached."""
    stack = Stack(spec)
    try:
        stack.start()
        yield stack
    except BaseException as exc:
        exc.add_note(stack.logs())
        raise
    finally:
        stack.close()


def completion(
    stack: Stack,
    prompt: str,
    *,
    max_tokens: int = 4,
    headers: dict[str, str] | None = None,
    request_id: str | None = None,
    **extra: Any,
) -> httpx.Response:
    """POST /v1/completions through Envoy with a fresh (or given) x-request-id."""
    rid = request_id or str(uuid.uuid4())
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, **extra}
    return httpx.post(
        f"{stack.base_url}/v1/completions",
        json=body,
        headers={"x-request-id": rid, **(headers or {})},
        timeout=30.0,
    )


def decisions(stack: Stack, n: int = 200) -> dict[str, list[str]]:
    """request id -> endpoints chosen by the picker (primary first), from /debug/decisions."""
    rows = httpx.get(f"{stack.metrics_url}/debug/decisions", params={"n": n}, timeout=5.0).json()
    return {row["request_id"]: list(row["endpoints"]) for row in rows}


def metric_sum(stack: Stack, name: str, **labels: str) -> float:
    """Sum over all label sets of the sample ``name`` (e.g. ``..._sum`` or ``..._total``) in /metrics
    (only those with ``labels``, when given)."""
    text = httpx.get(f"{stack.metrics_url}/metrics", timeout=5.0).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def served_by(response: httpx.Response) -> int:
    return int(response.headers["x-inference-port"])


def eventually(check: Callable[[], bool], timeout_s: float = 10.0, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()


def long_prefix(tag: str, words: int = 400) -> str:
    """A prompt prefix of ``words`` words that differs from other tags' from its first word."""
    return " ".join(f"{tag}{i % 97}" for i in range(words))
