"""Documented figures have one source: docs/figures.md. Elsewhere the docs link to it.

A line of README.md or docs/*.md that names ``make test``, ``make bench``, ``make demo`` (or
``python -m devtools.demo``, ``epp-bench all``) and states a duration must link docs/figures.md instead;
figures.md has a dated, measured row for each of the three."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures.md"
COMMANDS = re.compile(r"make (test|bench|demo)(?![-\w])|epp\.demo|epp-bench all")
DURATION = re.compile(r"\b\d+(\.\d+)?\s*(s|sec|seconds?|min|minutes?)\b|about a minute|\d+:\d\d\b")


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_figures_md_has_a_dated_measured_row_per_command() -> None:
    rows = [line for line in FIGURES.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    for command in ("make test", "make bench", "make demo"):
        row = next((r for r in rows if r.startswith(f"| `{command}`")), None)
        assert row is not None, f"docs/figures.md: no row for {command}"
        assert DURATION.search(row), row
        assert re.search(r"20\d\d-\d\d-\d\d", row), f"{command}: no date of measurement: {row}"


def test_no_other_page_states_those_durations_itself() -> None:
    offenders = []
    for path in _docs():
        if path == FIGURES:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            window = " ".join(lines[n - 1 : n + 1])  # the line and the next (prose wraps)
            if COMMANDS.search(line) and DURATION.search(window) and "figures.md" not in window:
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "state these durations in docs/figures.md and link it:\n" + "\n".join(offenders)
