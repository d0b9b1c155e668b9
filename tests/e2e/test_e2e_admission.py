"""End to end: a sheddable request (InferenceObjective priority < 0) gets 429 while the pool is saturated.

One simulated server with room for one running request; two long requests make it report a waiting
queue, which the saturation detector (queueDepthThreshold 1) reads as saturated.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from e2e_lib import completion, eventually, metric_sum, running

from devtools.stack import StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

OBJECTIVES = """\
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: batch}
spec: {priority: -1}
---
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: interactive}
spec: {priority: 5}
"""
CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
saturationDetector: {queueDepthThreshold: 1, kvCacheUtilThreshold: 0.8}
"""
OBJECTIVE = "x-gateway-inference-objective"


def test_sheddable_requests_get_429_while_saturated_and_others_are_served(tmp_path: Path) -> None:
    objectives = tmp_path / "objectives.yaml"
    objectives.write_text(OBJECTIVES)
    spec = StackSpec(
        servers=1,
        sim_args=("--profile", "8b-h100", "--time-scale", "4", "--max-num-seqs", "1"),
        picker_args=("--objectives-file", str(objectives), "--config-text", CONFIG),
    )
    with running(spec) as stack:
        assert completion(stack, "idle pool", headers={OBJECTIVE: "batch"}).status_code == 200
        busy = [
            threading.Thread(target=completion, args=(stack, f"busy {i}"), kwargs={"max_tokens": 120})
            for i in range(2)
        ]
        for t in busy:
            t.start()
        try:
            saturated = "inference_extension_flow_control_pool_saturation"
            assert eventually(lambda: metric_sum(stack, saturated) >= 1.0, timeout_s=10.0), stack.logs()
            r = completion(stack, "shed me", headers={OBJECTIVE: "batch"})
            assert r.status_code == 429, r.text
            assert r.headers["content-type"].startswith("application/json")
            assert r.json()["error"]["type"] and "saturated" in r.json()["error"]["message"]
            r = completion(stack, "serve me", headers={OBJECTIVE: "interactive"})
            assert r.status_code == 200, r.text
        finally:
            for t in busy:
                t.join(30)
        text = httpx.get(f"{stack.metrics_url}/metrics", timeout=5.0).text
        errors = [line for line in text.splitlines() if line.startswith("inference_objective_request_error")]
        assert any('error_code="ResourceExhausted"' in line for line in errors), errors
