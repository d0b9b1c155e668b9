"""End to end: ``predicted-latency-producer`` with upstream's latency predictor sidecars (the environment
GIE's chart gives the picker), through the real Envoy, epp-sim servers and a fake sidecar process
(``fake_latency_sidecar.py``, speaking the prediction and training servers' HTTP protocol).

* The sidecar predicts one endpoint fast and the other slow: every request goes to the fast one (two
  identical servers: the in-process model alone would not prefer either; each of the two is favoured
  in turn, so a picker that always chose one would fail); each request made one bulk
  call with one row per endpoint; the training samples arrive in bulk posts.
* The sidecar is down: every request is still served, predicted in process (the cold-start prior),
  and the failures are counted in ``/debug/plugins/state`` and on ``/metrics``.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_lib import completion, eventually, metric_sum, running, served_by
from test_e2e_predicted_latency import CONFIG, SIM

from devtools.stack import Stack, StackSpec, free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

FAKE = Path(__file__).with_name("fake_latency_sidecar.py")


@contextmanager
def fake_sidecar(port: int, favourite: int) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), str(port), "--favourite", str(favourite)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        assert eventually(up, timeout_s=15.0), _stderr(proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None or proc.stderr is None:
        return "no answer"
    return proc.stderr.read().decode(errors="replace")


def sidecar_state(stack: Stack) -> dict[str, Any]:
    state = httpx.get(f"{stack.metrics_url}/debug/plugins/state", timeout=5.0).json()
    sidecar: dict[str, Any] = state["predicted-latency-producer"]["sidecar"]
    return sidecar


@pytest.mark.parametrize("favourite", [0, 1])
def test_the_sidecar_predictions_steer_the_pick_and_samples_arrive_in_bulk(
    monkeypatch: pytest.MonkeyPatch, favourite: int
) -> None:
    (port,) = free_ports(1)
    with fake_sidecar(port, favourite) as url:
        monkeypatch.setenv("PREDICTION_SERVER_URL", url)
        monkeypatch.setenv("TRAINING_SERVER_URL", url)
        monkeypatch.setenv("LATENCY_FLUSH_INTERVAL_SEC", "1")
        spec = StackSpec(servers=2, sim_args=SIM, picker_args=("--config-text", CONFIG))
        with running(spec) as stack:
            rows = httpx.get(f"{stack.metrics_url}/debug/endpoints", timeout=5.0).json()
            favoured = int(rows[favourite]["address"].rsplit(":", 1)[1])  # the snapshot's order is the rows'
            n = 12
            served = Counter(served_by(completion(stack, f"steered {i}", max_tokens=2)) for i in range(n))
            assert served == {favoured: n}, (served, favoured)
            stats = httpx.get(f"{url}/stats", timeout=5.0).json()
            assert stats["predictCalls"] >= n  # one bulk call per request (the admitter reuses it)
            assert set(stats["rowsPerCall"]) == {2}
            state = sidecar_state(stack)
            assert state["predictionCalls"] >= n and state["predictionFailures"] == {}, state
            assert state["cyclesWithSidecarPredictions"] >= n, state
            assert metric_sum(stack, "pyepp_latency_sidecar_prediction_calls_total") >= n
            assert metric_sum(stack, "pyepp_latency_sidecar_predicted_rows_total") >= 2 * n
            assert metric_sum(stack, "pyepp_latency_sidecar_prediction_failures_total") == 0

            def trained() -> bool:
                return int(httpx.get(f"{url}/stats", timeout=5.0).json()["trainingEntries"]) >= n

            assert eventually(trained, timeout_s=10.0), httpx.get(f"{url}/stats", timeout=5.0).json()
            stats = httpx.get(f"{url}/stats", timeout=5.0).json()
            assert stats["trainingPosts"] < stats["trainingEntries"]  # bulk: several samples per post
            last = stats["lastEntry"]
            assert last["actual_ttft_ms"] > 0 and last["input_token_length"] > 0, last
            assert sidecar_state(stack)["trainingFailures"] == {}


def test_the_picker_predicts_in_process_when_the_sidecar_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    (port,) = free_ports(1)  # nothing listens there
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("PREDICTION_SERVER_URL", url)
    monkeypatch.setenv("TRAINING_SERVER_URL", url)
    monkeypatch.setenv("LATENCY_FLUSH_INTERVAL_SEC", "1")
    spec = StackSpec(servers=2, sim_args=SIM, picker_args=("--config-text", CONFIG))
    with running(spec) as stack:
        n = 8
        for i in range(n):
            assert completion(stack, f"fallback {i}", max_tokens=2).status_code == 200
        state = sidecar_state(stack)
        assert state["predictionFailures"].get("connection", 0) >= n, state
        assert state["cyclesWithSidecarPredictions"] == 0, state
        assert metric_sum(stack, "pyepp_latency_sidecar_prediction_failures_total") >= n  # what to alert on
        # the in-process model (cold-start prior) predicted every request
        assert metric_sum(stack, "llm_d_epp_request_ttft_prediction_duration_seconds_count") == n

        def lost() -> bool:
            s = sidecar_state(stack)
            return bool(s["trainingFailures"].get("connection", 0) >= 1 and s["trainingSamplesLost"] >= 1)

        assert eventually(lost, timeout_s=10.0), sidecar_state(stack)
