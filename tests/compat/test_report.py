"""docs/compatibility.md's generated section and the README's summary must match what the code and the
corpus give today."""

from __future__ import annotations

import pytest

from tests.compat.report import (
    BEGIN,
    DOC,
    END,
    README,
    README_BEGIN,
    README_END,
    README_HEADING,
    our_chart_keys,
    our_flags,
    render,
    summary,
    updated_doc,
    updated_readme,
)
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


def test_readme_summary_is_current() -> None:
    current = README.read_text()
    assert README_BEGIN in current and README_END in current, "README.md lacks the compat summary markers"
    assert current.index(README_HEADING) < current.index(README_BEGIN)
    assert updated_readme(current, summary()) == current, (
        "README.md's compatibility summary is stale: run `python -m tests.compat.report --write`"
    )


def test_readme_summary_has_every_repository_and_surface() -> None:
    text = summary()
    for needle in ("`gie`", "`llm-d-inference-scheduler`", "`llm-d-router`", "flags", "metric names"):
        assert needle in text
    assert "`inferencepool` Helm chart keys" in text and "`standalone` Helm chart keys" in text


def test_updated_readme_replaces_the_summary_or_inserts_it_under_the_heading() -> None:
    readme = f"# x\n\n{README_HEADING}\n\n| surface | status |\n"
    inserted = updated_readme(readme, "table\n")
    assert (
        inserted
        == f"# x\n\n{README_HEADING}\n\n{README_BEGIN}\ntable\n{README_END}\n\n| surface | status |\n"
    )
    assert updated_readme(inserted, "new\n") == inserted.replace("table\n", "new\n")
    assert updated_readme(inserted, "table\n") == inserted
    with pytest.raises(ValueError, match="heading"):
        updated_readme("# no heading\n", "table\n")


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


def test_metrics_surface_counts_opt_in_families_and_names_the_unregistered_ones() -> None:
    """Upstream registers the ext_proc stream families only with --enable-grpc-stream-metrics; the report
    builds the picker with that flag, so they count as present; a family never registered here is
    listed with its reason instead of only under "missing"."""
    from tests.compat.report import _surfaces, our_metrics

    assert {
        "llm_d_epp_extproc_streams_inflight",
        "llm_d_epp_extproc_stream_duration_seconds",
        "llm_d_epp_extproc_streams_total",
    } <= our_metrics()
    metrics = next(s for s in _surfaces() if s.title == "Metrics")
    assert any("`llm_d_epp_plugin_data_scope_violations_total`" in n for n in metrics.notes)
