"""End to end with the real Envoy, ``observability`` variant: usage is counted from the observer stream.

The routing ext_proc filter skips the response phase; a second ext_proc filter in observability mode
sends the response headers and body to the picker without waiting. The picker must count the usage of
both streamed (SSE ``include_usage``) and plain JSON responses exactly once, against the routed request
with the same ``x-request-id``, and must not treat the observer stream as a new request.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from e2e_lib import MODEL, completion, eventually, metric_sum, running

from devtools.stack import Stack, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SPEC = StackSpec(servers=2, sim_args=("--time-scale", "50"), envoy_variant="observability")
INPUT = "inference_objective_input_tokens_sum"
OUTPUT = "inference_objective_output_tokens_sum"
OUTPUT_COUNT = "inference_objective_output_tokens_count"
SIZES = "inference_objective_response_sizes_count"
ERRORS = "inference_objective_request_error_total"
DURATIONS = "inference_objective_request_duration_seconds_count"
RUNNING = "inference_objective_running_requests"


@pytest.fixture(scope="module", params=["h2", "ngh2", "grpcio"])
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    spec = replace(SPEC, picker_args=(f"--grpc-engine={request.param}",))
    with running(spec) as s:
        # Until the picker has seen one observer stream it completes routing streams when Envoy
        # closes them (right after routing): the first request is counted as a stream reset.
        assert completion(s, "warm up").status_code == 200
        assert eventually(lambda: metric_sum(s, RUNNING) == 0)
        yield s


def _streamed(stack: Stack, prompt: str, max_tokens: int) -> dict[str, int]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    body["stream_options"] = {"include_usage": True}
    headers = {"x-request-id": str(uuid.uuid4())}
    url = f"{stack.base_url}/v1/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30.0) as r:
        assert r.status_code == 200
        frames = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    usage: dict[str, int] = json.loads(frames[-2])["usage"]
    return usage


def _counters(stack: Stack) -> tuple[float, ...]:
    names = (INPUT, OUTPUT, OUTPUT_COUNT, SIZES, ERRORS, DURATIONS)
    return tuple(metric_sum(stack, name) for name in names)


def test_streamed_and_plain_requests_count_their_usage_once(stack: Stack) -> None:
    before = _counters(stack)
    usages = []
    for i in range(3):
        r = completion(stack, f"plain request number {i} " * (i + 1), max_tokens=5 + i)
        assert r.status_code == 200, r.text
        usages.append(r.json()["usage"])
    for i in range(3):
        usages.append(_streamed(stack, f"streamed request {i} " * (i + 2), max_tokens=7 + i))
    want_input = sum(u["prompt_tokens"] for u in usages)
    want_output = sum(u["completion_tokens"] for u in usages)
    assert want_input > 0 and want_output == 5 + 6 + 7 + 7 + 8 + 9

    def counted() -> bool:
        return _counters(stack)[2] - before[2] >= len(usages)

    assert eventually(counted, timeout_s=10), (_counters(stack), before, stack.logs())
    after = _counters(stack)
    assert after[0] - before[0] == want_input
    assert after[1] - before[1] == want_output
    assert after[2] - before[2] == len(usages)  # one observation per request: nothing counted twice
    assert after[3] - before[3] == len(usages)
    # the routing streams (closed by Envoy right after routing) completed through their observers
    assert after[4] - before[4] == 0
    assert after[5] - before[5] == len(usages)
    assert metric_sum(stack, RUNNING) == 0


def test_picker_log_has_no_protocol_errors(stack: Stack) -> None:
    assert completion(stack, "one more").status_code == 200
    assert _streamed(stack, "and a stream", 3)["completion_tokens"] == 3
    log = (stack.workdir / "picker.log").read_text()
    assert "unexpected" not in log
    assert "protocol error" not in log
