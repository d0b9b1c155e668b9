"""The model-rewrite decision counter under both naming schemes, with the client model name capped."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epp.admission.rewrites import RewriteDecision
from epp.server.metric_catalog import Naming
from epp.server.metrics import LABEL_CAP
from epp.server.rewrite_metrics import RewriteMetrics

NAMES = {
    Naming.LLM_D: {"llm_d_epp_model_rewrite_decisions_total"},
    Naming.INFERENCE: {"inference_extension_model_rewrite_decisions_total"},
    Naming.BOTH: {
        "llm_d_epp_model_rewrite_decisions_total",
        "inference_extension_model_rewrite_decisions_total",
    },
}


def totals(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.endswith("_total")
    }


@pytest.mark.parametrize("naming", list(Naming))
def test_each_decision_counts_once_per_exported_name(naming: Naming) -> None:
    registry = CollectorRegistry()
    record = RewriteMetrics(registry, naming)
    for target in ("v1", "v1", "v2"):
        record(RewriteDecision("canary", "food-review", target))
    got = totals(registry)
    assert {name for name, _ in got} == NAMES[naming]
    for name in NAMES[naming]:
        labels = {"model_rewrite_name": "canary", "model_name": "food-review"}
        assert got[(name, tuple(sorted({**labels, "target_model": "v1"}.items())))] == 2
        assert got[(name, tuple(sorted({**labels, "target_model": "v2"}.items())))] == 1


def test_client_model_names_beyond_the_cap_are_other() -> None:
    registry = CollectorRegistry()
    record = RewriteMetrics(registry, Naming.LLM_D)
    for i in range(LABEL_CAP + 5):
        record(RewriteDecision("generic", f"m{i}", "base"))
    record(RewriteDecision("generic", "m0", "base"))  # a name seen before the cap keeps its series
    models = {dict(labels)["model_name"]: v for (_, labels), v in totals(registry).items()}
    assert len(models) == LABEL_CAP + 1 and models["other"] == 5 and models["m0"] == 2
