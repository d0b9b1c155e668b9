"""End to end through the real Envoy (GIE fail-closed config), the picker and four simulated servers.

One stack serves the whole module. Each test sends its own requests (own x-request-id) and compares
what Envoy did (``x-inference-port`` of the answering server) with what the picker decided
(``/debug/decisions``), or what the client sees (status, JSON error body, SSE timing).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from e2e_lib import MODEL, completion, decisions, eventually, long_prefix, metric_sum, running, served_by

from devtools.stack import Stack, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SUBSET_HEADER = "x-test-subset"
MAX_BODY = 64 * 1024
# 8B/H100 profile 4x faster: ITL 3 ms, prefill overhead 7.5 ms.
SPEC = StackSpec(
    servers=4,
    sim_args=("--profile", "8b-h100", "--time-scale", "4"),
    picker_args=("--max-body-bytes", str(MAX_BODY)),
    subset_hint_header=SUBSET_HEADER,
)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running(SPEC) as s:
        # the picker is SERVING once its endpoint set is synced; wait for metrics of all four too
        assert eventually(lambda: _ready_count(s) == 4), s.logs()
        yield s


def _ready_count(stack: Stack) -> int:
    rows = httpx.get(f"{stack.metrics_url}/debug/endpoints", timeout=5.0).json()
    return sum(1 for row in rows if row["ready"])


def test_requests_land_on_the_endpoint_the_picker_chose(stack: Stack) -> None:
    sent = {}
    for i in range(12):
        r = completion(stack, f"{long_prefix(f'route{i}', 60)} question", request_id=f"route-{i}")
        assert r.status_code == 200, r.text
        sent[f"route-{i}"] = served_by(r)
    chosen = decisions(stack)
    for rid, port in sent.items():
        assert chosen[rid][0] == f"127.0.0.1:{port}", (rid, chosen.get(rid))
    assert set(sent.values()) <= set(stack.ports.servers)


def test_repeated_prefix_sticks_and_distinct_prefixes_spread(stack: Stack) -> None:
    shared = long_prefix("sticky")
    ports = [served_by(completion(stack, f"{shared} question {i}?")) for i in range(6)]
    assert len(set(ports)) == 1, ports
    firsts = [served_by(completion(stack, f"{long_prefix(f'spread{g}')} q")) for g in range(8)]
    assert len(set(firsts)) >= 2, firsts


def test_sse_streams_token_by_token(stack: Stack) -> None:
    body = {
        "model": MODEL,
        "prompt": "stream me " * 20,
        "max_tokens": 40,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    arrivals: list[float] = []
    frames: list[str] = []
    with httpx.stream("POST", f"{stack.base_url}/v1/completions", json=body, timeout=30.0) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
                frames.append(line[6:])
    assert frames[-1] == "[DONE]"
    usage = json.loads(frames[-2])["usage"]
    assert usage["completion_tokens"] == 40
    # 40 tokens at ~3 ms each: frames arrive over >= 60 ms in many separate bursts, not all at once
    assert arrivals[-2] - arrivals[0] >= 0.06, arrivals[-2] - arrivals[0]
    gaps = [b - a for a, b in itertools.pairwise(arrivals[:-2])]
    assert sum(1 for g in gaps if g > 0.001) >= 20, gaps


def test_usage_is_counted_by_the_picker(stack: Stack) -> None:
    before_in = metric_sum(stack, "inference_objective_input_tokens_sum")
    before_out = metric_sum(stack, "inference_objective_output_tokens_sum")
    r = completion(stack, "count my tokens please", max_tokens=7)
    assert r.status_code == 200
    prompt_tokens = r.json()["usage"]["prompt_tokens"]
    assert eventually(lambda: metric_sum(stack, "inference_objective_output_tokens_sum") >= before_out + 7)
    assert metric_sum(stack, "inference_objective_input_tokens_sum") >= before_in + prompt_tokens


def _assert_json_error(r: httpx.Response, status: int) -> dict[str, str]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert error["type"] and error["message"]
    return dict(error)


def test_bad_requests_get_json_errors_through_envoy(stack: Stack) -> None:
    url = f"{stack.base_url}/v1/completions"
    _assert_json_error(httpx.post(url, content=b"{not json", timeout=10.0), 400)
    error = _assert_json_error(httpx.post(url, json={"prompt": "no model"}, timeout=10.0), 400)
    assert "model" in error["message"]
    big = {"model": MODEL, "prompt": "x" * (MAX_BODY + 10)}
    _assert_json_error(httpx.post(url, json=big, timeout=10.0), 413)


def test_subset_hint_restricts_the_choice(stack: Stack) -> None:
    only = stack.endpoints[2]
    for i in range(4):
        r = completion(stack, f"{long_prefix(f'subset{i}', 50)}", headers={SUBSET_HEADER: only})
        assert r.status_code == 200, r.text
        assert served_by(r) == stack.ports.servers[2]
    two = f"{stack.endpoints[0]},{stack.endpoints[1]}"
    ports = {served_by(completion(stack, f"two {i}", headers={SUBSET_HEADER: two})) for i in range(6)}
    assert ports <= set(stack.ports.servers[:2])
    _assert_json_error(completion(stack, "none", headers={SUBSET_HEADER: "10.9.9.9:1"}), 503)


def test_a_stopped_server_stops_receiving_traffic(stack: Stack) -> None:
    """Runs last in this module: it stops server 3 for good.

    Within a few seconds (the picker notices failed scrapes) every request avoids the stopped server;
    requests routed to it before that fail with Envoy's 503 (the override-host config retries them).
    """
    stack.stop_server(3)
    dead = stack.ports.servers[3]
    streak: list[int] = []
    failures = 0
    deadline = time.monotonic() + 15.0
    while len(streak) < 12 and time.monotonic() < deadline:
        r = completion(stack, f"{long_prefix(f'after{len(streak)}-{failures}', 30)}")
        if r.status_code == 200 and served_by(r) != dead:
            streak.append(served_by(r))
        else:
            streak.clear()
            failures += 1
            time.sleep(0.1)
    print(f"requests failed while the picker had not yet noticed the stopped server: {failures}")
    assert len(streak) == 12, stack.logs()
    assert dead not in streak
