"""The extproc-envoy benchmark: wrk output parsing, and a one-second run of two configurations."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.extproc_bench import main, parse_wrk

WRK_OUTPUT = """Running 2s test @ http://127.0.0.1:1/v1/completions
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.37ms  841.02us  12.01ms   81.20%
  Latency Distribution
     50%    2.35ms
     75%    2.61ms
     90%    3.12ms
     99%    5.60ms
  12584 requests in 2.00s, 9.41MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
  Non-2xx or 3xx responses: 4
Requests/sec:   6284.11
"""


def test_parse_wrk_reads_requests_percentiles_and_errors() -> None:
    assert parse_wrk(WRK_OUTPUT) == (12584, 2.35, 5.6, 7)
    slow = WRK_OUTPUT.replace("5.60ms", "1.20s").replace("2.35ms", "850.00us")
    assert parse_wrk(slow)[1:3] == (0.85, 1200.0)


@pytest.mark.e2e
@pytest.mark.timeout(90)
@pytest.mark.skipif(shutil.which("wrk") is None, reason="the short run uses wrk")
def test_short_run_writes_a_report_with_cpu_per_request(tmp_path: Path) -> None:
    argv = ["--servers", "2", "--seconds", "1", "--concurrency", "2", "--bodies", "1k", "--kinds", "plain"]
    argv += ["--configs", "envoy-only,gie-fail-closed", "--out", str(tmp_path)]
    assert main(argv) == 0
    points = json.loads((tmp_path / "points.json").read_text())
    assert [(p["config"], p["think_ms"] > 0) for p in points] == [
        ("envoy-only", False),
        ("gie-fail-closed", False),
        ("gie-fail-closed", True),  # paced at about half the maximum
        ("envoy-only", True),
    ]
    base, picker = points[:2]
    assert base["requests"] > 0 and picker["requests"] > 0
    assert base["msgs_per_req"] == 0 and picker["msgs_per_req"] >= 4  # headers + body, both ways
    assert picker["picker_us_per_req"] > 0
    report = (tmp_path / "report.md").read_text()
    assert "picker CPU per 1k request" in report
    assert "added p50 at c=16 paced" in report
    generator = "wrk" if shutil.which("wrk") else "python aiohttp (no wrk on PATH)"
    assert report.startswith(f"Load generator: {generator}; extra picker flags: (none).")


@pytest.mark.e2e
@pytest.mark.timeout(90)
def test_picker_script_runs_as_the_picker(tmp_path: Path) -> None:
    """``--picker-script`` (how a prototype engine is measured behind Envoy) runs that file as the picker,
    with the picker's flags, and the point is measured through it."""
    marker = tmp_path / "argv.txt"
    script = tmp_path / "picker.py"
    script.write_text(
        "import pathlib, sys\n"
        f"pathlib.Path({str(marker)!r}).write_text(' '.join(sys.argv[1:]))\n"
        "from epp.cli import main\n"
        "sys.exit(main())\n"
    )
    argv = ["--servers", "1", "--seconds", "1", "--concurrency", "2", "--bodies", "1k", "--kinds", "plain"]
    argv += ["--configs", "gie-fail-closed", "--picker-script", str(script), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    flags = marker.read_text().split()
    assert "--grpc-port" in flags and flags[flags.index("-v") + 1] in {"0", "1"}
    [point] = json.loads((tmp_path / "out" / "points.json").read_text())
    assert point["requests"] > 0 and point["errors"] == 0 and point["msgs_per_req"] >= 4
