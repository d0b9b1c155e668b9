"""Loading InferenceModelRewrite YAML files (standalone mode) and their errors."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from epp.admission.rewrites import ModelRewrite, RewriteRule, RewriteStore, RewriteTarget
from epp.admission.rewrites_file import RewritesFileError, load_rewrites_file, parse_rewrites

A = "metadata: {name: a}\n"
HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceModelRewrite\n"

# GIE's test/testdata/inferencepool-with-model-hermetic.yaml object, a weighted split, and a List.
GOOD = """
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceModelRewrite
metadata:
  name: rewrite-test
  namespace: default
spec:
  poolRef:
    name: vllm-qwen3-32b-pool
  rules:
  - matches:
    - model:
        value: model-to-be-rewritten
    targets:
    - modelRewrite: rewritten-model
---
apiVersion: llm-d.ai/v1alpha2
kind: InferenceModelRewrite
metadata: {name: canary, creationTimestamp: "2025-01-31T12:00:00Z"}
spec:
  poolRef: {name: other-pool, group: inference.networking.k8s.io, kind: InferencePool}
  rules:
  - matches: [{model: {type: Exact, value: food-review}}, {model: {value: food}}]
    targets: [{modelRewrite: v1, weight: 90}, {modelRewrite: v2, weight: 10}]
---
apiVersion: v1
kind: List
items:
- apiVersion: inference.networking.x-k8s.io/v1alpha2
  kind: InferenceModelRewrite
  metadata: {name: catch-all, creationTimestamp: 2024-06-01T00:00:00Z}
  spec:
    rules: [{targets: [{modelRewrite: base}]}]
"""


def test_load_file(tmp_path: Path) -> None:
    path = tmp_path / "rewrites.yaml"
    path.write_text(GOOD)
    t2025 = datetime.datetime(2025, 1, 31, 12, tzinfo=datetime.UTC).timestamp()
    t2024 = datetime.datetime(2024, 6, 1, tzinfo=datetime.UTC).timestamp()
    assert load_rewrites_file(path) == [
        ModelRewrite(
            "rewrite-test",
            (RewriteRule(("model-to-be-rewritten",), (RewriteTarget("rewritten-model"),)),),
            0.0,
            "vllm-qwen3-32b-pool",
            "default",
        ),
        ModelRewrite(
            "canary",
            (RewriteRule(("food-review", "food"), (RewriteTarget("v1", 90), RewriteTarget("v2", 10))),),
            t2025,
            "other-pool",
        ),
        ModelRewrite("catch-all", (RewriteRule((), (RewriteTarget("base"),)),), t2024),
    ]
    names = [r.name for r in load_rewrites_file(path, pool_name="vllm-qwen3-32b-pool")]
    assert names == ["rewrite-test", "catch-all"]  # other pools skipped; no poolRef: any pool


def test_file_order_does_not_decide_precedence_timestamps_do() -> None:
    text = f"""{HEAD}metadata: {{name: newer, creationTimestamp: "2025-02-01T00:00:00Z"}}
spec: {{rules: [{{matches: [{{model: {{value: m}}}}], targets: [{{modelRewrite: from-newer}}]}}]}}
---
{HEAD}metadata: {{name: older, creationTimestamp: "2025-01-01T00:00:00+00:00"}}
spec: {{rules: [{{matches: [{{model: {{value: m}}}}], targets: [{{modelRewrite: from-older}}]}}]}}
"""
    hit = RewriteStore(parse_rewrites(text)).rule_for("m")
    assert hit is not None and hit[1] == "older" and hit[0].targets[0].model == "from-older"


SPEC = "spec: {rules: [{targets: [{modelRewrite: t}]}]}\n"


@pytest.mark.parametrize(
    ("text", "location", "message"),
    [
        ("apiVersion: v1\nkind: InferenceModelRewrite\n" + A + SPEC, "documents[0].apiVersion",
         "expected one of"),
        (HEAD.replace("InferenceModelRewrite", "InferenceObjective") + A + SPEC,
         "documents[0].kind", "expected 'InferenceModelRewrite'"),
        (HEAD + SPEC, "documents[0].metadata", "expected a mapping"),
        (HEAD + "metadata: {name: ''}\n" + SPEC, "documents[0].metadata.name", "non-empty string"),
        (HEAD + "metadata: {name: a, creationTimestamp: yesterday}\n" + SPEC,
         "documents[0].metadata.creationTimestamp", "RFC 3339"),
        (HEAD + A, "documents[0].spec", "expected a mapping"),
        (HEAD + A + "spec: {rules: [], extra: 1}\n", "documents[0].spec.extra", "unknown field"),
        (HEAD + A + "spec: {poolRef: {group: g}, rules: []}\n", "documents[0].spec.poolRef.name",
         "non-empty string"),
        (HEAD + A + "spec: {}\n", "documents[0].spec.rules", "expected a list"),
        (HEAD + A + "spec: {rules: [{matches: []}]}\n", "documents[0].spec.rules[0].targets",
         "expected a list"),
        (HEAD + A + "spec: {rules: [{targets: []}]}\n", "documents[0].spec.rules[0].targets",
         "at least one target"),
        (HEAD + A + "spec: {rules: [{matches: [{model: {type: Prefix, value: m}}], "
         "targets: [{modelRewrite: t}]}]}\n", "documents[0].spec.rules[0].matches[0].model.type", "'Exact'"),
        (HEAD + A + "spec: {rules: [{matches: [{model: {value: ''}}], "
         "targets: [{modelRewrite: t}]}]}\n", "documents[0].spec.rules[0].matches[0].model.value",
         "non-empty"),
        (HEAD + A + "spec: {rules: [{matches: [{}], targets: [{modelRewrite: t}]}]}\n",
         "documents[0].spec.rules[0].matches[0].model", "expected a mapping"),
        (HEAD + A + "spec: {rules: [{targets: [{modelRewrite: t, weight: 0}]}]}\n",
         "documents[0].spec.rules[0].targets[0].weight", "[1, 1000000]"),
        (HEAD + A + "spec: {rules: [{targets: [{modelRewrite: t, weight: 1000001}]}]}\n",
         "documents[0].spec.rules[0].targets[0].weight", "[1, 1000000]"),
        (HEAD + A + "spec: {rules: [{targets: [{modelRewrite: t, weight: '5'}]}]}\n",
         "documents[0].spec.rules[0].targets[0].weight", "integer"),
        (HEAD + A + "spec: {rules: [{targets: [{modelRewrite: t, weight: 3}, "
         "{modelRewrite: u}]}]}\n", "documents[0].spec.rules[0].targets[1].weight",
         "on every target or on none"),
        (HEAD + A + "spec: {rules: [{targets: [{weight: 3}]}]}\n",
         "documents[0].spec.rules[0].targets[0].modelRewrite", "non-empty string"),
        (HEAD + A + "spec: {rules: [{targets: [{modelRewrite: t, extra: 1}]}]}\n",
         "documents[0].spec.rules[0].targets[0].extra", "unknown field"),
        (HEAD + A + SPEC + "---\n" + HEAD + A + SPEC,
         "documents[1].metadata.name", "duplicate name 'a'"),
        ("apiVersion: v1\nkind: List\nitems: {}\n", "documents[0].items", "expected a list"),
    ],
)  # fmt: skip
def test_errors_name_file_field_and_expectation(text: str, location: str, message: str) -> None:
    with pytest.raises(RewritesFileError) as err:
        parse_rewrites(text, "rewrites.yaml")
    assert err.value.source == "rewrites.yaml"
    assert err.value.location == location, err.value
    assert message in err.value.message
    assert str(err.value).startswith(f"rewrites.yaml: {location}: ")


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(RewritesFileError, match="cannot read"):
        load_rewrites_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [")
    with pytest.raises(RewritesFileError, match=f"{bad}: invalid YAML"):
        load_rewrites_file(bad)
