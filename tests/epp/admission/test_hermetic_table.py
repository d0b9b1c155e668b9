"""GIE's hermetic EPP table, its scheduling cases: admission (subset hint) + the scheduler, in process.

Ported from ``test/integration/epp/hermetic_test.go`` and ``common_tests.go`` (GIE, last commit with
``pkg/epp``), with the harness's config ``testdata/default-config.yaml`` (queue, kv-cache-utilization,
prefix-cache and lora-affinity scorers, weight 1 each; max-score-picker added by default). Pods are
``P(index, waiting queue, kv usage, active adapters...)`` at ``192.168.1.<index+1>:8000``; the request
targets the rewritten model (``target_model``). The protocol-level cases of the same table (bad bodies,
split bodies, header-only, rewrite, usage) run through the real Envoy in
``tests/e2e/test_e2e_conformance.py``.
"""

from __future__ import annotations

import pytest

from epp.admission import Admitter
from epp.request.errors import RequestError
from scheduler.config import load_config_text
from scheduler.types import Endpoint, LLMRequest, Metrics

CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: kv-cache-utilization-scorer
  - type: prefix-cache-scorer
  - type: lora-affinity-scorer
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
      - pluginRef: kv-cache-utilization-scorer
      - pluginRef: prefix-cache-scorer
      - pluginRef: lora-affinity-scorer
"""
MY_MODEL_TARGET = "my-model-12345"
SQL_LORA_TARGET = "sql-lora-1fdg2"
SHEDDABLE_TARGET = "sql-lora-sheddable-12345"  # GIE's modelSheddableTarget role: an adapter name


def P(index: int, queue: int, kv: float, *adapters: str) -> Endpoint:
    metrics = Metrics(
        waiting_queue_size=queue, kv_cache_usage=kv, running_adapters=frozenset(adapters), updated_at=1.0
    )
    return Endpoint(f"192.168.1.{index + 1}:8000", metrics=metrics)


CASES = [
    (
        "select lower queue and kv cache",
        MY_MODEL_TARGET,
        [P(0, 3, 0.2), P(1, 0, 0.1), P(2, 10, 0.2)],
        None,
        1,
    ),
    (
        "select active lora, low queue",
        SQL_LORA_TARGET,
        [P(0, 0, 0.2, "foo", "bar"), P(1, 0, 0.1, "foo", SQL_LORA_TARGET), P(2, 10, 0.2, "foo", "bar")],
        None,
        1,
    ),
    (
        "select lora despite higher kv cache (affinity)",
        SQL_LORA_TARGET,
        [P(0, 10, 0.2, "foo", "bar"), P(1, 10, 0.4, "foo", SQL_LORA_TARGET), P(2, 10, 0.3, "foo")],
        None,
        1,
    ),
    (
        "do not shed requests by default",
        SQL_LORA_TARGET,
        [P(0, 6, 0.2, "foo", "bar", SQL_LORA_TARGET), P(1, 0, 0.85, "foo"), P(2, 10, 0.9, "foo")],
        None,
        0,
    ),
    (
        "split body across chunks",
        SHEDDABLE_TARGET,
        [P(0, 4, 0.2, "foo", "bar", SHEDDABLE_TARGET), P(1, 4, 0.85, "foo", SHEDDABLE_TARGET)],
        None,
        0,
    ),
    (
        "subsetting: select best from subset",
        SQL_LORA_TARGET,
        [P(0, 0, 0.2, "foo"), P(1, 0, 0.1, "foo", SQL_LORA_TARGET), P(2, 10, 0.2, "foo")],
        frozenset({"192.168.1.1:8000", "192.168.1.2:8000", "192.168.1.3:8000"}),
        1,
    ),
    (
        "subsetting: partial match",
        SQL_LORA_TARGET,
        [P(0, 0, 0.2, "foo"), P(1, 0, 0.1, "foo", SQL_LORA_TARGET), P(2, 10, 0.2, "foo")],
        frozenset({"192.168.1.3:8000"}),
        2,
    ),
]


@pytest.mark.parametrize(("name", "target", "pods", "subset", "winner"), CASES, ids=[c[0] for c in CASES])
def test_hermetic_scheduling(
    name: str, target: str, pods: list[Endpoint], subset: frozenset[str] | None, winner: int
) -> None:
    config = load_config_text(CONFIG)
    scheduler = config.build_scheduler()
    request = LLMRequest(request_id="test", model="m", target_model=target, prompt_text=name, priority=2)
    candidates = Admitter(config.saturation_detector, lambda: 1.0).admit(request, subset, pods)
    result = scheduler.schedule(request, candidates)
    assert [e.address for e in result.endpoints] == [pods[winner].address]


def test_subsetting_no_pods_match_is_503() -> None:
    request = LLMRequest(request_id="test", model="m", target_model=SQL_LORA_TARGET)
    pods = [P(0, 0, 0.2, "foo"), P(1, 0, 0.1, "foo", SQL_LORA_TARGET)]
    with pytest.raises(RequestError) as info:
        Admitter(None, lambda: 1.0).admit(request, frozenset({"192.168.1.99:8000"}), pods)
    assert info.value.status == 503
