"""InferenceModelRewrite end to end: the real Envoy, the picker with ``--model-rewrites-file``, two
simulated vLLM servers serving the base model under several names.

* GIE's hermetic "rewrite request model" case (``test/integration/epp/hermetic_test.go`` with the
  ``rewrite-test`` object of ``test/testdata/inferencepool-with-model-hermetic.yaml``): a request for
  ``model-to-be-rewritten`` (a name the servers do not serve) reaches them as ``rewritten-model``, the
  response names the client's model, and ``inference_objective_request_total`` counts it under
  (``model-to-be-rewritten``, ``rewritten-model``).
* A weighted split (3:1 between two served names): every response names the alias (buffered JSON and
  SSE), and the decisions follow the weights within a binomial bound.
* The servers receive exactly the drawn name: a 1:1 split between a served name and one no server
  serves gives a 404 naming the unserved model for each request drawn to it and 200 for the others,
  as many as the decision counter reports per target.
"""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from e2e_lib import MODEL, eventually, running
from prometheus_client.parser import text_string_to_metric_families

from devtools.stack import Stack, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

REWRITES = """\
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceModelRewrite
metadata: {name: rewrite-test, namespace: default}
spec:
  poolRef: {name: vllm-qwen3-32b-pool}
  rules:
  - matches: [{model: {value: model-to-be-rewritten}}]
    targets: [{modelRewrite: rewritten-model}]
---
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceModelRewrite
metadata: {name: canary}
spec:
  rules:
  - matches: [{model: {value: food-review}}]
    targets: [{modelRewrite: food-review-v1, weight: 3}, {modelRewrite: food-review-v2, weight: 1}]
  - matches: [{model: {value: half-missing}}]
    targets: [{modelRewrite: food-review-v1}, {modelRewrite: not-served}]
"""
SERVED = (MODEL, "rewritten-model", "food-review-v1", "food-review-v2")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path = tmp_path_factory.mktemp("rewrites") / "rewrites.yaml"
    path.write_text(REWRITES)
    spec = StackSpec(
        servers=2,
        sim_args=("--time-scale", "50", "--served-model-name", *SERVED),
        single_sim_process=True,
        picker_args=("--model-rewrites-file", str(path), "-v", "2"),
    )
    with running(spec) as s:
        yield s


def post(stack: Stack, model: str, **fields: object) -> httpx.Response:
    body = {"model": model, "prompt": "hello", "max_tokens": 3, **fields}
    return httpx.post(
        f"{stack.base_url}/v1/completions",
        json=body,
        headers={"x-request-id": str(uuid.uuid4())},
        timeout=30.0,
    )


def samples(stack: Stack, name: str, **labels: str) -> dict[str, float]:
    """``target_model`` (or ``target_model_name``) -> value of the samples ``name`` with ``labels``."""
    text = httpx.get(f"{stack.metrics_url}/metrics", timeout=5.0).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and labels.items() <= s.labels.items():
                key = s.labels.get("target_model", s.labels.get("target_model_name", ""))
                out[key] = out.get(key, 0.0) + s.value
    return out


DECISIONS = "inference_extension_model_rewrite_decisions_total"


def test_gie_rewrite_request_model(stack: Stack) -> None:
    assert post(stack, "model-to-be-rewritten-typo").status_code == 404  # no rule: the servers' 404
    r = post(stack, "model-to-be-rewritten")
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "model-to-be-rewritten"
    counted = samples(stack, "inference_objective_request_total", model_name="model-to-be-rewritten")
    assert counted == {"rewritten-model": 1.0}
    decisions = samples(
        stack, DECISIONS, model_rewrite_name="rewrite-test", model_name="model-to-be-rewritten"
    )
    assert decisions == {"rewritten-model": 1.0}
    log = (stack.workdir / "picker.log").read_text()
    assert '"event": "model rewrite"' in log or '"event":"model rewrite"' in log


def test_weighted_split_and_model_name_rewritten_back(stack: Stack) -> None:
    n = 240
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: post(stack, "food-review"), range(n)))
    assert [r.status_code for r in responses] == [200] * n
    assert {r.json()["model"] for r in responses} == {"food-review"}
    decisions = samples(stack, DECISIONS, model_rewrite_name="canary", model_name="food-review")
    assert sum(decisions.values()) == n and set(decisions) == {"food-review-v1", "food-review-v2"}
    bound = 5 * math.sqrt(n * 0.75 * 0.25)  # 5 binomial standard deviations
    assert abs(decisions["food-review-v1"] - 0.75 * n) <= bound, decisions
    requests = samples(stack, "inference_objective_request_total", model_name="food-review")
    assert requests == decisions  # scheduled under the drawn target model
    with httpx.stream(
        "POST",
        f"{stack.base_url}/v1/completions",
        json={"model": "food-review", "prompt": "hi", "max_tokens": 4, "stream": True},
        timeout=30.0,
    ) as streamed:
        assert streamed.status_code == 200
        frames = [line[6:] for line in streamed.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    assert {json.loads(f)["model"] for f in frames[:-1]} == {"food-review"}


def test_servers_receive_the_drawn_model(stack: Stack) -> None:
    n = 60
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: post(stack, "half-missing"), range(n)))
    statuses = Counter(r.status_code for r in responses)
    assert set(statuses) == {200, 404}, statuses
    assert all("not-served" in r.text for r in responses if r.status_code == 404)
    assert all(r.json()["model"] == "half-missing" for r in responses if r.status_code == 200)
    assert eventually(
        lambda: (
            samples(stack, DECISIONS, model_name="half-missing")
            == {"food-review-v1": statuses[200], "not-served": statuses[404]}
        )
    ), (samples(stack, DECISIONS, model_name="half-missing"), statuses)
