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

from bench.flow_control_bench import OBJECTIVES  # the critical / sheddable pair the benchmark uses
from devtools.stack import StackSpec

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


HOLDBACK = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: 2}
- type: priority-holdback-policy
  parameters: {minCeiling: 0.5}
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
flowControl:
  saturationDetector: {pluginRef: concurrency-detector}
  defaultRequestTTL: 30s
  usageLimitPolicyPluginRef: priority-holdback-policy
"""


def test_holdback_ranks_the_objectives_bands_while_nothing_else_waits(tmp_path: Path) -> None:
    """Objectives 10 and -1 provision bands 10, 0 and -1 (ceilings 1.0 / 0.75 / 0.5). One sheddable
    request in flight (saturation 0.5) gates the sheddable band although nothing else waits; a critical
    request is routed at once; the queued sheddable one goes when the first completes."""
    objectives = tmp_path / "objectives.yaml"
    objectives.write_text(OBJECTIVES)
    spec = StackSpec(
        servers=1,
        sim_args=("--profile", "8b-h100", "--time-scale", "1", "--max-num-seqs", "4"),
        picker_args=(
            "--config-text",
            HOLDBACK,
            "--objectives-file",
            str(objectives),
            "--allow-experimental-plugins",  # priority-holdback-policy is Alpha upstream
        ),
    )
    with running(spec) as stack:
        results: dict[str, int] = {}
        done: list[str] = []

        def run(tag: str, max_tokens: int, objective: str) -> None:
            headers = {"x-gateway-inference-objective": objective}
            r = completion(stack, tag, max_tokens=max_tokens, headers=headers)
            results[tag] = r.status_code
            done.append(tag)

        first = threading.Thread(target=run, args=("shed 1", 150, "sheddable"))
        first.start()
        assert eventually(lambda: metric_sum(stack, "inference_objective_running_requests") >= 1, 10.0)
        second = threading.Thread(target=run, args=("shed 2", 4, "sheddable"))
        second.start()
        queue_size = "inference_extension_flow_control_queue_size"
        assert eventually(lambda: metric_sum(stack, queue_size) == 1, 10.0), stack.logs()
        run("critical", 4, "critical")  # past the waiting sheddable request, at once
        assert done == ["critical"] and results["critical"] == 200, (done, results)
        first.join(60)
        second.join(30)
        assert done == ["critical", "shed 1", "shed 2"] and set(results.values()) == {200}, (done, results)
