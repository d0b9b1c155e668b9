"""End to end: a scaled-down ``epp-bench routing`` run (simulated fleet, Envoy, the picker).

Runs the smoke versions of the shared-prefix and the multi-turn chat scenarios with Envoy round-robin
and the picker's default profile, each on a fresh fleet, and checks that the report and its plots are
written and that the picker's server-side prefix-cache hit rate beats round-robin's (a routing-quality
check, not a timing check).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import HEADER
from bench.routing import main
from devtools.envoy_config import envoy_binary

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _table(report: str) -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == len(HEADER) and cells[0] != HEADER[0]:
            rows[cells[0]] = dict(zip(HEADER, cells, strict=True))
    return rows


def _percent(text: str) -> float:
    assert text.endswith("%"), text
    return float(text[:-1])


def test_smoke_report_and_picker_beats_round_robin_on_hit_rate(tmp_path: Path) -> None:
    if not envoy_binary().exists():
        pytest.skip("Envoy is not installed")
    argv = ["--smoke", "--scenario", "shared-prefix", "--routers", "envoy-round-robin,picker-default",
            "--out", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    report = (tmp_path / "report.md").read_text()
    assert (tmp_path / "shared-prefix-ttft-cdf.png").stat().st_size > 0
    assert (tmp_path / "shared-prefix-picker-default-load.png").stat().st_size > 0
    assert (tmp_path / "raw" / "shared-prefix-picker-default.jsonl").exists()
    rows = _table(report)
    assert set(rows) == {"envoy-round-robin", "picker-default"}, report
    for row in rows.values():
        assert row["errors"] == "0", report
    picker, rr = rows["picker-default"], rows["envoy-round-robin"]
    assert _percent(picker["hit rate"]) > _percent(rr["hit rate"]), report
    assert picker["decide p50 ms"] != "–" and picker["picker CPU s/1k req"] != "–", report
    assert "TTFT p90 at least 10x lower than round-robin" in report


def test_smoke_multi_turn_chat_picker_beats_round_robin_on_hit_rate(tmp_path: Path) -> None:
    """Multi-turn chat through /v1/chat/completions with growing history, through the real Envoy."""
    if not envoy_binary().exists():
        pytest.skip("Envoy is not installed")
    argv = ["--smoke", "--scenario", "multi-turn", "--routers", "envoy-round-robin,picker-default",
            "--out", str(tmp_path), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    rows = _table((tmp_path / "report.md").read_text())
    assert set(rows) == {"envoy-round-robin", "picker-default"}
    for row in rows.values():
        assert row["errors"] == "0", rows
    assert _percent(rows["picker-default"]["hit rate"]) > _percent(rows["envoy-round-robin"]["hit rate"]), (
        rows
    )
