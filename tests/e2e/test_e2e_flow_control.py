"""End to end through the real Envoy: flow control queues requests while the pool is saturated.

One simulated server; ``concurrency-detector`` with ``maxConcurrency: 1`` makes the pool saturated
while one request runs. Further requests wait in the picker (the ext_proc stream of each simply waits)
and are routed when the running one completes; clients that give up while queued leave the queue,
and the metrics count each outcome.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from e2e_lib import MODEL, completion, eventually, metric_sum, one_slot_flow_control, running

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

OUTCOMES = "llm_d_epp_flow_control_requests_total"


def outcome(stack: object, name: str) -> float:
    text = httpx.get(f"{stack.metrics_url}/metrics", timeout=5.0).text  # type: ignore[attr-defined]
    total = 0.0
    for line in text.splitlines():
        if line.startswith(OUTCOMES + "{") and f'outcome="{name}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def impatient(stack: object, tag: str, gave_up: list[str]) -> None:
    """A client that disconnects after 0.5 s, while its request is still queued."""
    try:
        httpx.post(
            f"{stack.base_url}/v1/completions",  # type: ignore[attr-defined]
            json={"model": MODEL, "prompt": tag, "max_tokens": 4},
            headers={"x-gateway-inference-fairness-id": "impatient"},
            timeout=0.5,
        )
    except httpx.TimeoutException:
        gave_up.append(tag)


def test_requests_wait_while_saturated_and_clients_can_leave_the_queue(tmp_path: Path) -> None:
    spec = one_slot_flow_control("round-robin-fairness-policy")
    with running(spec) as stack:
        assert completion(stack, "warm up").status_code == 200
        results: dict[str, int] = {}

        def run(tag: str, max_tokens: int, tenant: str) -> None:
            r = completion(
                stack, tag, max_tokens=max_tokens, headers={"x-gateway-inference-fairness-id": tenant}
            )
            results[tag] = r.status_code

        blocker = threading.Thread(target=run, args=("blocker", 400, "a"))
        blocker.start()
        queue_size = "inference_extension_flow_control_queue_size"
        assert eventually(lambda: metric_sum(stack, "inference_objective_running_requests") >= 1, 10.0)
        gave_up: list[str] = []
        leavers = [threading.Thread(target=impatient, args=(stack, f"leave {i}", gave_up)) for i in range(3)]
        waiters = [threading.Thread(target=run, args=(f"wait {i}", 4, "b")) for i in range(2)]
        for t in [*leavers, *waiters]:
            t.start()
            time.sleep(0.05)
        assert eventually(lambda: metric_sum(stack, queue_size) >= 2, 10.0), stack.logs()
        for t in leavers:
            t.join(10)
        assert sorted(gave_up) == ["leave 0", "leave 1", "leave 2"], (gave_up, results)
        assert eventually(lambda: outcome(stack, "EvictedContextCancelled") == 3, 10.0), stack.logs()
        assert "wait 0" not in results and blocker.is_alive()  # still queued behind the blocker
        blocker.join(60)
        for t in waiters:
            t.join(30)
        assert results == {"blocker": 200, "wait 0": 200, "wait 1": 200}, results
        assert eventually(lambda: metric_sum(stack, queue_size) == 0, 10.0)
        assert outcome(stack, "Dispatched") == 4  # warm-up, blocker and the two waiters
        assert metric_sum(stack, "inference_extension_flow_control_request_queue_duration_seconds_count") == 7
