"""The corpus collector: extraction from YAML, Markdown, Go and Helm templates, and freshness."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat import collect, surface
from tests.compat.collect import (
    go_documents,
    helm_documents,
    markdown_documents,
    render_template,
    yaml_documents,
)

MIRRORS = Path("/work/.mirror")
DOC = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n"


def test_yaml_finds_documents_and_embedded_strings() -> None:
    stream = f"kind: Service\n---\n{DOC}---\napiVersion: v1\nkind: ConfigMap\ndata:\n  epp.yaml: |\n"
    stream += "".join(f"    {line}\n" for line in DOC.splitlines())
    found = list(yaml_documents(stream))
    assert [how for how, _ in found] == ["YAML document 2", "YAML document 3, string at .data.epp.yaml"]
    assert all(doc == DOC for _, doc in found)


def test_yaml_skips_other_kinds_and_broken_documents() -> None:
    assert list(yaml_documents("kind: EndpointPickerConfigList\n")) == []
    assert list(yaml_documents("kind: EndpointPickerConfig\nplugins: [\n")) == []


def test_markdown_code_blocks_are_dedented() -> None:
    text = (
        "Intro\n\n1. Step:\n   ```yaml\n" + "".join(f"   {line}\n" for line in DOC.splitlines()) + "   ```\n"
    )
    assert list(markdown_documents(text)) == [("Markdown code block 1", DOC)]


def test_go_raw_literals_are_named_and_format_strings_skipped() -> None:
    text = f"package x\n\nconst successText = `\n{DOC}`\n\nvar f = fmt.Sprintf(`\n{DOC}name: %s\n`, n)\n"
    found = list(go_documents(text))
    assert len(found) == 1
    assert found[0][0] == "Go raw string literal successText at line 3"


def test_helm_template_renders_under_the_default_actions() -> None:
    template = (
        "data:\n"
        "  default-plugins.yaml: |\n"
        "    apiVersion: llm-d.ai/v1alpha1\n"
        "    kind: EndpointPickerConfig\n"
        "    plugins:\n"
        "    {{- if .Values.router.latencyPredictor.enabled }}\n"
        "    - type: predicted-latency-producer\n"
        "    {{- else }}\n"
        "    - type: metrics-data-source\n"
        "      parameters:\n"
        '        scheme: {{ .Values.router.epp.metricsDataSource.scheme | default "http" | quote }}\n'
        "    {{- end }}\n"
        "    {{- range $p := $parsers }}\n"
        "    - type: {{ $p }}\n"
        "    {{- end }}\n"
    )
    ((how, doc),) = list(helm_documents(template))
    assert how.startswith("Helm template, ConfigMap data key default-plugins.yaml")
    assert doc.endswith('plugins:\n- type: metrics-data-source\n  parameters:\n    scheme: "http"\n')


def test_helm_renderer_refuses_unknown_actions() -> None:
    with pytest.raises(KeyError, match="HELM_ACTIONS"):
        render_template("{{- if .Values.somethingNew }}\nx\n{{- end }}\n")


@pytest.mark.skipif(not MIRRORS.is_dir(), reason="the upstream git mirrors are not on this machine")
def test_checked_in_corpus_matches_the_mirrors(tmp_path: Path) -> None:
    """The corpus is generated: refreshing it from the mirrors changes nothing (no hand edits)."""
    items, skipped = collect.collect(MIRRORS)
    collect.write(items, skipped, tmp_path)
    for item in items:
        assert (tmp_path / item.filename).read_text() == (collect.CORPUS / item.filename).read_text(), (
            item.filename
        )
    for name in ("manifest.yaml", "skipped.txt"):
        assert (tmp_path / name).read_text() == (collect.CORPUS / name).read_text(), name
    assert len(items) == len(list(collect.CORPUS.glob("*/*.yaml")))


@pytest.mark.skipif(not MIRRORS.is_dir(), reason="the upstream git mirrors are not on this machine")
def test_checked_in_upstream_lists_match_the_mirrors() -> None:
    def names(found: dict[str, set[str]]) -> set[str]:
        return set(found)

    assert names(surface.flags(MIRRORS)) == set(surface.load_list("flags"))
    assert names(surface.metrics(MIRRORS)) == set(surface.load_list("metrics"))
    for chart in surface.CHARTS:
        assert names(surface.chart_keys(MIRRORS, chart)) == set(surface.load_list(f"chart_keys_{chart}"))


def test_config_in_a_manifest_that_is_not_valid_yaml() -> None:
    manifest = "kind: Deployment\nspec:\n  ...\n  args:\n  - --config-text\n  - |\n"
    manifest += "".join(f"    {line}\n" for line in DOC.splitlines()) + "  ...\n"
    assert list(yaml_documents(manifest)) == [("the file (not valid YAML), block scalar at line 6", DOC)]
