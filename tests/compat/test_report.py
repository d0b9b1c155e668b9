"""docs/compatibility.md's generated section must match what the code and the corpus give today."""

from __future__ import annotations

import pytest

from tests.compat.report import BEGIN, DOC, END, our_chart_keys, our_flags, render, updated_doc
from tests.compat.surface import load_list


def test_compatibility_doc_is_current() -> None:
    current = DOC.read_text()
    assert updated_doc(current, render()) == current, (
        "docs/compatibility.md is stale: run `python -m tests.compat.report --write`"
    )


def test_updated_doc_replaces_only_the_generated_section() -> None:
    doc = f"intro\n{BEGIN}\nold\n{END}\noutro\n"
    assert updated_doc(doc, "new\n") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"
    with pytest.raises(ValueError, match="markers"):
        updated_doc("no markers", "new\n")


@pytest.mark.parametrize("kind", ["flags", "metrics", "chart_keys_inferencepool", "chart_keys_standalone"])
def test_upstream_lists_are_checked_in(kind: str) -> None:
    names = load_list(kind)
    assert len(names) > 20
    assert all(where for where in names.values())


def test_our_side_is_read_from_the_code() -> None:
    assert {"grpc-port", "config-file", "v"} <= our_flags()
    assert "help" not in our_flags()
    assert "inferenceExtension.replicas" in our_chart_keys("inferencepool")
    assert our_chart_keys("standalone")
