"""``epp-bench soak``: the verdicts from synthetic windows, and a 30-second run through the real stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.soak import Window, main, verdicts


def _windows(rss: list[float], cpu: list[float], errors: int = 0, shed: int = 0) -> list[Window]:
    return [
        Window(10.0 * (i + 1), 100, errors if i == 3 else 0, shed if i == 2 else 0, 10.0, 5.0, 9.0, c, r)
        for i, (r, c) in enumerate(zip(rss, cpu, strict=True))
    ]


FLAT = [400.0] * 8


@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        (
            _windows([90, 100, 101, 102, 103, 104, 104, 104.9], FLAT),
            ["PASS errors", "PASS picker RSS", "PASS picker CPU"],
        ),
        # the warm-up's growth (90 -> 100) is not judged; 100 -> 106 is
        (
            _windows([90, 100, 101, 102, 103, 104, 105, 106], FLAT),
            ["PASS errors", "MISS picker RSS", "PASS picker CPU"],
        ),
        (  # CPU per request climbing: first three after warm-up 400, last three 450 (+12.5%)
            _windows([100] * 8, [400, 400, 400, 400, 420, 450, 450, 450]),
            ["PASS errors", "PASS picker RSS", "MISS picker CPU"],
        ),
        (  # cheaper at the end is not a regression
            _windows([100] * 8, [400, 400, 400, 400, 380, 300, 300, 300]),
            ["PASS errors", "PASS picker RSS", "PASS picker CPU"],
        ),
        (
            _windows([100] * 8, FLAT, errors=1, shed=5),
            ["MISS errors", "PASS picker RSS", "PASS picker CPU", "NOTE 5"],
        ),
        (_windows([100] * 3, FLAT[:3]), ["PASS errors", "MISS too few windows"]),
    ],
)
def test_verdicts(windows: list[Window], expected: list[str]) -> None:
    lines = verdicts(windows, warm_windows=2)
    assert [line[: len(prefix)] for line, prefix in zip(lines, expected, strict=True)] == expected


def test_bad_durations_are_refused() -> None:
    with pytest.raises(SystemExit):
        main(["--minutes", "1", "--window", "30", "--warmup", "30"])  # no two windows after the warm-up
    with pytest.raises(SystemExit):
        main(["--load", "1.5"])


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_short_soak_through_envoy_writes_its_report(tmp_path: Path) -> None:
    argv = ["--minutes", "0.2", "--window", "2", "--warmup", "2", "--probe-seconds", "1", "--servers", "2"]
    assert main([*argv, "--tokens", "8", "--out", str(tmp_path)]) == 0
    windows = json.loads((tmp_path / "windows.json").read_text())
    assert len(windows) == 6
    assert sum(w["requests"] for w in windows) > 0 and not any(w["errors"] for w in windows)
    assert all(w["rss_mb"] > 10 and w["picker_us_per_req"] > 0 and w["in_flight"] >= 0 for w in windows)
    report = (tmp_path / "report.md").read_text()
    assert "PASS errors: 0 of" in report and "picker RSS growth after warm-up" in report
    assert "picker CPU per request flat" in report
