"""Precise prefix routing end to end: the real Envoy, the picker and three ``epp-sim`` servers that
publish vLLM KV events (vLLM's wire format and block hashes) to the picker's bound ZMQ socket (llm-d's
central mode, ``kvEventsConfig.zmqEndpoint``). A fourth ``epp-sim`` is the tokenizer sidecar the
``token-producer`` renders prompts with (llm-d's ``vllm launch render`` sidecar).

Checked: a repeated prefix goes to the server whose events say it holds the prefix (the precise score
is 1 there and 0 elsewhere); a server that restarts (fresh process, sequence back to 0) loses its
blocks in the picker's index; llm-d's KV-cache event and index metrics are on ``/metrics``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_lib import MODEL, completion, eventually, long_prefix, running, served_by
from prometheus_client.parser import text_string_to_metric_families

from devtools.stack import ManagedProcess, Stack, StackSpec, free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

ZMQ_PORT, RENDER_PORT = free_ports(2)
SEED = os.environ.get("PYTHONHASHSEED", "")  # the servers' seed (vLLM reads PYTHONHASHSEED too)
CONFIG = f"""
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters:
    modelName: {MODEL}
    vllm: {{url: "http://127.0.0.1:{RENDER_PORT}"}}
- type: precise-prefix-cache-scorer
  parameters:
    tokenProcessorConfig: {{blockSize: 16, hashSeed: "{SEED}"}}
    kvEventsConfig: {{zmqEndpoint: "tcp://127.0.0.1:{ZMQ_PORT}", concurrency: 2}}
    indexerConfig: {{kvBlockIndexConfig: {{enableMetrics: true, metricsLoggingInterval: 1s}}}}
- type: max-score-picker
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: precise-prefix-cache-scorer
  - pluginRef: max-score-picker
"""
SIM_ARGS = (
    "--profile", "8b-h100", "--time-scale", "10", "--block-size", "16",
    "--kv-events-endpoint", f"tcp://127.0.0.1:{ZMQ_PORT}",
)  # fmt: skip
SPEC = StackSpec(servers=3, sim_args=SIM_ARGS, picker_args=("--config-text", CONFIG))


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    log = Path(tempfile.mkdtemp(prefix="epp-render-")) / "render.log"
    argv = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", str(RENDER_PORT)]
    render = ManagedProcess("render", [*argv, "--profile", "8b-h100"], log)
    render.start()
    try:
        with running(SPEC) as s:
            yield s
    finally:
        render.stop(5.0)


def _scores(stack: Stack, request_id: str) -> dict[str, float]:
    """The precise scorer's score per endpoint in the picker's decision for ``request_id``."""
    rows = httpx.get(f"{stack.metrics_url}/debug/decisions", params={"n": 200}, timeout=5.0).json()
    row: dict[str, Any] = next(r for r in rows if r["request_id"] == request_id)
    scores: dict[str, float] = row["decision"]["profiles"][0]["scores"]["precise-prefix-cache-scorer"]
    return scores


def test_repeated_prefix_goes_to_the_server_holding_it_and_a_restart_drops_its_blocks(stack: Stack) -> None:
    shared = long_prefix("precise", 300)
    first = completion(stack, f"{shared} first question", request_id="precise-0")
    assert first.status_code == 200, first.text
    owner = served_by(first)
    address = f"127.0.0.1:{owner}"

    def routed_to_owner(i: int) -> bool:
        r = completion(stack, f"{shared} question {i}", request_id=f"precise-{i}")
        assert r.status_code == 200, r.text
        return served_by(r) == owner and _scores(stack, f"precise-{i}").get(address, 0.0) > 0.9

    # the owner's BlockStored events reach the picker asynchronously: the next requests go there
    attempt = iter(range(1, 100))
    assert eventually(lambda: routed_to_owner(next(attempt)), timeout_s=20), stack.logs()
    for i in range(100, 105):
        assert routed_to_owner(i), _scores(stack, f"precise-{i}")
    others = {a: s for a, s in _scores(stack, "precise-104").items() if a != address}
    assert others and all(s == 0.0 for s in others.values()), others

    index = stack.ports.servers.index(owner)
    stack.stop_server(index)
    stack.servers[index] = stack.start_server(index)
    # the fresh process publishes from sequence 0 as soon as it stores blocks: the picker drops
    # everything the old process held. Distinct prefixes reach it eventually (all scores tie at 0); its
    # first batches may be lost while its socket connects (ZMQ's slow joiner), so wait for three.
    probe = iter(range(1000))
    landed = []

    def restarted_owner_published() -> bool:
        n = next(probe)
        r = completion(stack, f"{long_prefix(f'other{n}', 40)} q", request_id=f"probe-{n}")
        if r.status_code == 200 and served_by(r) == owner:
            landed.append(n)
        return len(landed) >= 3

    assert eventually(restarted_owner_published, timeout_s=60), stack.logs()
    time.sleep(1.0)  # its first events reach the picker
    r = completion(stack, f"{shared} again", request_id="after-restart")
    assert r.status_code == 200, r.text
    after = _scores(stack, "after-restart")
    assert after.get(address) == 0.0, (after, stack.logs())


def test_kv_cache_event_and_index_metrics_are_exported(stack: Stack) -> None:
    shared = long_prefix("metrics", 120)
    for i in range(3):
        assert completion(stack, f"{shared} q{i}", request_id=f"metrics-{i}").status_code == 200

    def scrape() -> dict[str, float]:
        text = httpx.get(f"{stack.metrics_url}/metrics", timeout=5.0).text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out

    assert eventually(lambda: scrape().get("llm_d_epp_kv_cache_index_admissions_total", 0) > 0, timeout_s=10)
    m = scrape()
    assert m["llm_d_epp_kv_cache_events_messages_received_total{pod_identifier=local-subscriber}"] > 0
    assert m["llm_d_epp_kv_cache_events_pool_capacity"] == 2
    assert m["llm_d_epp_kv_cache_events_active_subscribers"] == 1
    assert m["llm_d_epp_kv_cache_index_lookup_requests_total"] >= 3
    assert m["llm_d_epp_kv_cache_index_lookup_hits_total"] > 0
    assert m["llm_d_epp_kv_cache_index_lookup_latency_seconds_count"] >= 3
    assert m["kvcache_index_admissions_total"] == m["llm_d_epp_kv_cache_index_admissions_total"]
    assert "llm_d_epp_kv_cache_events_pool_queue_depth" in m
