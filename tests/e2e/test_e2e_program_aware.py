"""End to end through the real Envoy: ``program-aware-fairness`` serves the program with the least
attained service first, from the model server's token usage, and exports its gauges.

One simulated server; ``concurrency-detector`` with ``maxConcurrency: 1`` saturates the pool while one
request runs. Program "heavy" has already consumed ~400 weighted tokens; while a blocker runs, "heavy"
queues a request and then "light" (no service yet) queues one. Round robin or FCFS would serve "heavy"
first (it became active first); least attained service serves "light" first.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from e2e_lib import completion, eventually, metric_sum, one_slot_flow_control, running
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

FAIRNESS = "x-llm-d-inference-fairness-id"


def gauges(stack: object, name: str) -> dict[str, float]:
    text = httpx.get(f"{stack.metrics_url}/metrics", timeout=5.0).text  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[sample.labels.get("program_id", "")] = sample.value
    return out


def test_least_attained_service_goes_first(tmp_path: object) -> None:
    spec = one_slot_flow_control("program-aware-fairness", "{lasWeightHeadWait: 0, lasHalfLifeSeconds: 0}")
    with running(spec) as stack:
        assert (
            completion(stack, "heavy history", max_tokens=200, headers={FAIRNESS: "heavy"}).status_code == 200
        )
        service = "llm_d_epp_program_aware_attained_service_tokens"
        assert eventually(lambda: gauges(stack, service).get("heavy", 0) >= 400, 10.0), stack.logs()
        finished: list[str] = []
        status: dict[str, int] = {}
        lock = threading.Lock()

        def run(tag: str, max_tokens: int, program: str) -> None:
            r = completion(stack, tag, max_tokens=max_tokens, headers={FAIRNESS: program})
            with lock:
                finished.append(tag)
                status[tag] = r.status_code

        blocker = threading.Thread(target=run, args=("blocker", 300, "blocker"))
        blocker.start()
        assert eventually(lambda: metric_sum(stack, "inference_objective_running_requests") >= 1, 10.0)
        heavy = threading.Thread(target=run, args=("heavy", 4, "heavy"))
        heavy.start()
        time.sleep(0.2)
        light = threading.Thread(target=run, args=("light", 4, "light"))
        light.start()
        queued = "inference_extension_flow_control_queue_size"
        assert eventually(lambda: metric_sum(stack, queued) >= 2, 10.0), stack.logs()
        for t in (blocker, heavy, light):
            t.join(60)
        assert status == {"blocker": 200, "heavy": 200, "light": 200}, status
        assert finished == ["blocker", "light", "heavy"], finished
        got = gauges(stack, service)
        assert got["heavy"] > got["light"] > 0, got
        waits = gauges(stack, "llm_d_epp_program_aware_avg_wait_time_milliseconds")
        assert waits["light"] > 0 and waits["heavy"] > 0, waits  # both waited behind the blocker
        index = gauges(stack, "llm_d_epp_program_aware_jains_fairness_index")
        assert 0.0 < index[""] <= 1.0, index
