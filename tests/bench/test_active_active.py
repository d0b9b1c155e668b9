"""End to end: two picker replicas behind one Envoy (``picker-precise-x2``): Envoy spreads the ext_proc
streams over both, both route on the KV events every server publishes to each of them, and a repeated
prefix lands on the same server whichever replica picks it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.routers import ROUTERS, running_router
from bench.scenarios import MODEL
from devtools.envoy_config import envoy_binary

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


def _requests_seen(metrics_url: str) -> float:
    text = httpx.get(metrics_url + "/metrics", timeout=5.0).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "llm_d_epp_request"
        for s in f.samples
        if s.name == "llm_d_epp_request_total"
    )


def test_two_replicas_share_the_streams_and_agree_on_the_prefix_owner(tmp_path: Path) -> None:
    if not envoy_binary().exists():
        pytest.skip("Envoy is not installed")
    sim = ("--model", MODEL, "--profile", "8b-h100", "--time-scale", "20", "--block-size", "16")
    with running_router(
        ROUTERS["picker-precise-x2"], servers=3, sim_args=sim, model=MODEL, workdir=tmp_path
    ) as running:
        assert len(running.replica_metrics_urls) == 2
        shared = " ".join(f"w{i}" for i in range(400))
        served: list[str] = []
        with httpx.Client(timeout=30.0) as client:
            for i in range(24):
                body = {"model": MODEL, "prompt": f"{shared} question {i}", "max_tokens": 2}
                r = client.post(running.base_url + "/v1/completions", json=body)
                assert r.status_code == 200, r.text
                served.append(r.headers.get("x-inference-port", ""))
        seen = [_requests_seen(url) for url in running.replica_metrics_urls]
        assert all(n >= 4 for n in seen), seen  # round robin over the two ext_proc hosts
        # after the first few requests (the owner's events reach both replicas), one server serves the prefix
        tail = served[8:]
        assert max(tail.count(p) for p in set(tail)) >= len(tail) - 2, served
