"""End to end: predicted-latency routing through the real Envoy and epp-sim servers.

* Two servers, one with a 200 ms prefill overhead: after warm-up the picker's in-process model
  predicts the slow one's latency and ``latency-scorer`` routes away from it; ``/debug/plugins/state``
  shows the trained model; ``/metrics`` has the producer's actual and predicted TTFT per request and
  one prediction duration per predicted cycle (every cycle: the cold-start prior predicts before the
  model is ready).
* One busy server: a sheddable request whose ``x-slo-ttft-ms`` no endpoint can meet gets 429 with a
  JSON reason from ``latency-slo-admitter``; a non-sheddable one is served.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_lib import completion, eventually, long_prefix, metric_sum, running, served_by

from devtools.stack import Stack, StackSpec
from scheduler.plugins.latency.model import MIN_SAMPLES

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
- type: latency-scorer
- type: latency-slo-admitter
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: latency-scorer
  - pluginRef: max-score-picker
"""
OBJECTIVES = """\
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: batch}
spec: {priority: -1}
"""
OBJECTIVE = "x-gateway-inference-objective"
SIM = ("--profile", "8b-h100", "--time-scale", "1")


def model_state(stack: Stack) -> dict[str, Any]:
    """The predicted-latency-producer's model, from the picker's /debug/plugins/state."""
    state = httpx.get(f"{stack.metrics_url}/debug/plugins/state", timeout=5.0).json()
    model: dict[str, Any] = state["predicted-latency-producer"]["model"]
    return model


def test_routes_away_from_the_slow_server_after_warm_up() -> None:
    spec = StackSpec(
        servers=2,
        sim_args=SIM,
        server_args=(("--prefill-overhead", "200ms"), ()),
        picker_args=("--config-text", CONFIG),
    )
    with running(spec) as stack:
        slow, fast = stack.ports.servers
        for i in range(MIN_SAMPLES + 8):
            assert completion(stack, f"warm up {i}", max_tokens=2).status_code == 200
        assert eventually(lambda: bool(model_state(stack)["ready"]), timeout_s=10.0), model_state(stack)
        assert model_state(stack)["samples"] >= MIN_SAMPLES
        served = Counter(served_by(completion(stack, f"measured {i}", max_tokens=2)) for i in range(20))
        assert served[fast] >= 18, (served, slow, fast, model_state(stack))
        requests = MIN_SAMPLES + 8 + 20

        def recorded() -> bool:
            actual = metric_sum(stack, "inference_objective_request_ttft_seconds_count")
            return actual == requests

        assert eventually(recorded, timeout_s=5.0)
        predicted = metric_sum(stack, "llm_d_epp_request_predicted_ttft_seconds_count")
        assert predicted == requests
        assert metric_sum(stack, "llm_d_epp_request_predicted_ttft_seconds_sum") > 0
        timed = metric_sum(stack, "llm_d_epp_request_ttft_prediction_duration_seconds_count")
        assert timed == requests  # the cold-start prior predicts from the first cycle on


def test_admitter_rejects_an_impossible_slo_with_429(tmp_path: Path) -> None:
    objectives = tmp_path / "objectives.yaml"
    objectives.write_text(OBJECTIVES)
    spec = StackSpec(
        servers=1,
        sim_args=SIM,
        picker_args=("--objectives-file", str(objectives), "--config-text", CONFIG),
    )
    with running(spec) as stack:
        for i in range(MIN_SAMPLES + 4):
            assert completion(stack, f"warm up {i}", max_tokens=2).status_code == 200
        assert eventually(lambda: bool(model_state(stack)["ready"]), timeout_s=10.0), model_state(stack)
        busy = threading.Thread(
            target=completion, args=(stack, long_prefix("busy", 800)), kwargs={"max_tokens": 400}
        )
        busy.start()
        try:

            def loaded() -> bool:
                rows = httpx.get(f"{stack.metrics_url}/debug/endpoints", timeout=5.0).json()
                m = rows[0]["metrics"]
                return bool(m["running_requests"] >= 1 and m["kv_cache_usage"] >= 0.02)

            assert eventually(loaded, timeout_s=5.0)
            slo = {OBJECTIVE: "batch", "x-slo-ttft-ms": "0.001"}
            r = completion(stack, "too tight", headers=slo)
            assert r.status_code == 429, r.text
            assert r.headers["content-type"].startswith("application/json")
            message = r.json()["error"]["message"]
            assert "latency-slo-admitter" in message and "x-slo-ttft-ms=0.001" in message
            assert completion(stack, "loose", headers={**slo, "x-slo-ttft-ms": "600000"}).status_code == 200
            assert completion(stack, "not sheddable", headers={"x-slo-ttft-ms": "0.001"}).status_code == 200
        finally:
            busy.join(30)
