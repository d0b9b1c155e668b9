"""Loading InferenceObjective YAML files for standalone mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from epp.admission import InferenceObjective, ObjectivesFileError, load_objectives_file, parse_objectives

HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceObjective\n"
GOOD = """
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: critical, namespace: default}
spec: {priority: 10, poolRef: {name: pool-a}}
---
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata: {name: batch}
spec: {priority: -1, poolRef: {name: pool-b}}
---
apiVersion: v1
kind: List
items:
- apiVersion: inference.networking.x-k8s.io/v1alpha2
  kind: InferenceObjective
  metadata: {name: plain}
"""


def test_load_file(tmp_path: Path) -> None:
    path = tmp_path / "objectives.yaml"
    path.write_text(GOOD)
    assert load_objectives_file(path) == [
        InferenceObjective("critical", 10, "pool-a", "default"),
        InferenceObjective("batch", -1, "pool-b"),
        InferenceObjective("plain", 0),
    ]
    assert [o.name for o in load_objectives_file(path, pool_name="pool-a")] == ["critical", "plain"]


@pytest.mark.parametrize(
    "text, location, fragment",
    [
        ("apiVersion: v9\nkind: InferenceObjective\n", "documents[0].apiVersion", "expected one of"),
        (
            "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceModel\n",
            "documents[0].kind",
            "InferenceObjective",
        ),
        (
            "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceObjective\nmetadata: {}\n",
            "documents[0].metadata.name",
            "non-empty string",
        ),
        (
            "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceObjective\n"
            "metadata: {name: a}\nspec: {priority: high}\n",
            "documents[0].spec.priority",
            "integer",
        ),
        (
            "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceObjective\n"
            "metadata: {name: a}\nspec: {criticality: Critical}\n",
            "documents[0].spec.criticality",
            "unknown field",
        ),
        (
            f"{HEAD}metadata: {{name: a}}\n---\n{HEAD}metadata: {{name: a}}\n",
            "documents[1].metadata.name",
            "duplicate",
        ),
        ("kind: List\nitems: 3\n", "documents[0].items", "list"),
        ("- just a list\n", "documents[0]", "mapping"),
    ],
)
def test_invalid_files_name_source_location_and_expectation(text: str, location: str, fragment: str) -> None:
    with pytest.raises(ObjectivesFileError) as info:
        parse_objectives(text, "obj.yaml")
    assert info.value.source == "obj.yaml" and info.value.location == location
    assert fragment in info.value.message
    assert str(info.value).startswith(f"obj.yaml: {location}: ")


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ObjectivesFileError, match="invalid YAML"):
        parse_objectives("a: [", "x.yaml")
    with pytest.raises(ObjectivesFileError, match="cannot read"):
        load_objectives_file(tmp_path / "missing.yaml")
