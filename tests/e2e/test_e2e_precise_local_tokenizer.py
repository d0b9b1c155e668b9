"""Precise prefix routing with the picker's in-process tokenizer, end to end, with no render sidecar.

The real Envoy, the picker (``precise-prefix-cache-scorer`` with ``indexerConfig.tokenizersPoolConfig``,
``local`` backend) and three ``epp-sim`` servers started with ``--tokenizer DIR`` that publish vLLM KV
events to the picker's bound ZMQ socket. The tokenizer (a BPE with a BOS post-processor, trained here
from a fixed corpus, and a Jinja chat template in ``tokenizer_config.json``) is the same directory for
the servers and the picker. No ``token-producer``, no render
server: the block keys the picker computes from its own tokenisation must be the ones the servers
announce, which shows as a precise score of 1 on the server holding a shared prefix (0 elsewhere), for
completions and for chat requests.
"""

from __future__ import annotations

import os
import string
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_lib import MODEL, completion, eventually, long_prefix, metric_sum, running, served_by
from testutil import write_tokenizer

from devtools.stack import Stack, StackSpec, free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

(ZMQ_PORT,) = free_ports(1)
SEED = os.environ.get("PYTHONHASHSEED", "")
CORPUS = [long_prefix(tag, 50) for tag in ("precise", "chat", "question", "again")] + [
    " ".join(string.ascii_letters + string.digits + string.punctuation)
]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)
TOKENIZER = write_tokenizer(
    Path(tempfile.mkdtemp(prefix="epp-e2e-tok-")) / "model",
    CORPUS,
    bos=True,
    vocab_size=300,
    chat_template=TEMPLATE,
)
CONFIG = f"""
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-scorer
  parameters:
    tokenProcessorConfig: {{blockSize: 16, hashSeed: "{SEED}"}}
    kvEventsConfig: {{zmqEndpoint: "tcp://127.0.0.1:{ZMQ_PORT}", concurrency: 2}}
    indexerConfig:
      tokenizersPoolConfig:
        modelName: {MODEL}
        workersCount: 2
        local: {{modelTokenizerMap: {{{MODEL}: "{TOKENIZER}"}}}}
      prefixStoreConfig: {{blockSize: 64}}
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
    "--tokenizer", str(TOKENIZER.parent), "--kv-events-endpoint", f"tcp://127.0.0.1:{ZMQ_PORT}",
)  # fmt: skip
SPEC = StackSpec(servers=3, sim_args=SIM_ARGS, picker_args=("--config-text", CONFIG))


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with running(SPEC) as s:
        yield s


def _scores(stack: Stack, request_id: str) -> dict[str, float]:
    rows = httpx.get(f"{stack.metrics_url}/debug/decisions", params={"n": 200}, timeout=5.0).json()
    row: dict[str, Any] = next(r for r in rows if r["request_id"] == request_id)
    scores: dict[str, float] = row["decision"]["profiles"][0]["scores"]["precise-prefix-cache-scorer"]
    return scores


def _chat(stack: Stack, messages: list[dict[str, Any]], request_id: str) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "max_tokens": 4, "ignore_eos": True}
    headers = {"x-request-id": request_id or str(uuid.uuid4())}
    return httpx.post(f"{stack.base_url}/v1/chat/completions", json=body, headers=headers, timeout=30.0)


def _routes_to_owner(stack: Stack, send: Any, tag: str) -> None:
    first = send(f"{tag}-0", 0)
    assert first.status_code == 200, first.text
    owner = served_by(first)
    address = f"127.0.0.1:{owner}"

    def routed_to_owner(i: int) -> bool:
        r = send(f"{tag}-{i}", i)
        assert r.status_code == 200, r.text
        return served_by(r) == owner and _scores(stack, f"{tag}-{i}").get(address, 0.0) > 0.9

    attempt = iter(range(1, 100))
    assert eventually(lambda: routed_to_owner(next(attempt)), timeout_s=20), stack.logs()
    for i in range(100, 104):
        assert routed_to_owner(i), _scores(stack, f"{tag}-{i}")
    others = {a: s for a, s in _scores(stack, f"{tag}-103").items() if a != address}
    assert others and all(s == 0.0 for s in others.values()), others


def test_completions_with_a_shared_prefix_go_to_the_server_holding_it(stack: Stack) -> None:
    shared = long_prefix("precise", 300)
    _routes_to_owner(
        stack, lambda rid, i: completion(stack, f"{shared} question {i}", request_id=rid), "local-completions"
    )


def test_chat_with_a_shared_system_prompt_goes_to_the_server_holding_it(stack: Stack) -> None:
    system = {"role": "system", "content": long_prefix("chat", 300)}

    def send(rid: str, i: int) -> httpx.Response:
        return _chat(stack, [system, {"role": "user", "content": f"again question {i}"}], rid)

    _routes_to_owner(stack, send, "local-chat")


def test_the_tokenizer_cache_shows_on_metrics_and_debug_state(stack: Stack) -> None:
    """After prompts sharing a prefix, ids come from the cache (``/metrics``), and the plugin's state
    names the tokenizer's cut and the event ingestion (no hash mismatch: the servers' keys are ours)."""
    shared = long_prefix("metrics", 300)
    for i in range(3):
        assert completion(stack, f"{shared} question {i}").status_code == 200
    cached = metric_sum(stack, "pyepp_precise_tokenizer_tokens_total", source="cache")
    assert cached > 300, cached
    assert metric_sum(stack, "pyepp_precise_tokenizer_tokens_total", source="tokenizer") > 0
    state = httpx.get(f"{stack.metrics_url}/debug/plugins/state", timeout=5.0).json()
    (precise,) = [v for v in state.values() if isinstance(v, dict) and "tokenizer" in v]
    assert precise["tokenizer"]["cut"] == "words" and precise["tokenizer"]["chatTemplate"] is True
    assert precise["tokenizer"]["tokensFromCache"] >= cached
    assert precise["events"]["batches"] > 0 and precise["events"]["hashMismatches"] == 0, precise
    assert precise["index"]["servers"] >= 1 and precise["index"]["entries"] > 0, precise
