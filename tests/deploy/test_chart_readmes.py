"""Each chart's README says what it deploys and carries a values table generated from values.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from chart_values_doc import BEGIN, END, HELM, rendered, value_comments, values_table

CHARTS = sorted(p.parent for p in HELM.glob("*/Chart.yaml"))


def test_both_charts_are_covered() -> None:
    assert [c.name for c in CHARTS] == ["inferencepool", "standalone"]


@pytest.mark.parametrize("chart", CHARTS, ids=lambda p: p.name)
def test_readme_values_table_is_current(chart: Path) -> None:
    current, wanted = rendered(chart)
    assert current == wanted, (
        f"{chart.name}/README.md: run .venv/bin/python tests/deploy/chart_values_doc.py --write"
    )
    text = (chart / "README.md").read_text()
    assert text.startswith(f"# {chart.name}\n") and "helm install" in text and "It deploys" in text


@pytest.mark.parametrize("chart", CHARTS, ids=lambda p: p.name)
def test_table_lists_every_value_of_values_yaml(chart: Path) -> None:
    values = yaml.safe_load((chart / "values.yaml").read_text())
    listed = {row.split("`")[1] for row in values_table(chart).splitlines()[2:]}

    def covered(node: dict[str, object], prefix: str) -> None:
        for key, value in node.items():
            path = prefix + key
            if isinstance(value, dict) and value:
                covered(value, path + ".")
                continue
            ancestors = {path} | {path.rsplit(".", n)[0] for n in range(1, path.count(".") + 1)}
            assert ancestors & listed, f"{path} is not in the {chart.name} values table"

    covered(values, "")


def test_generator_reads_comments_and_stales() -> None:
    text = "# file header\n\na:\n  # the b value\n  # (two lines)\n  b: 1\n  c:\n    # deep\n    d: x\n"
    assert value_comments(text) == {"a.b": "the b value (two lines)", "a.c.d": "deep"}
    assert BEGIN.startswith("<!--") and END.startswith("<!--")
