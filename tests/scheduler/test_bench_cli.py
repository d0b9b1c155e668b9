"""epp-bench dispatch and a tiny run of the scheduler benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import cli
from bench.scheduler_bench import main as scheduler_bench_main


def test_unknown_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for bench in cli.BENCHMARKS:
        assert bench.name in out


def test_unavailable_module_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "BENCHMARKS", (cli.Benchmark("ghost", "bench.no_such_module_here"),))
    assert cli.main(["ghost"]) == 2
    assert "not available" in capsys.readouterr().err
    assert cli.main(["all"]) == 0
    assert "ghost: skipped (module bench.no_such_module_here is not in this build)" in capsys.readouterr().out


def test_scheduler_benchmark_tiny_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.scheduler_bench as sb

    original = sb.measure_index
    monkeypatch.setattr(sb, "measure_index", lambda: original(endpoints=2, capacity=300))
    out_file = tmp_path / "figures.json"
    code = scheduler_bench_main(["--quick", "--endpoints", "4", "--prompts", "1024", "--json", str(out_file)])
    assert code == 0
    out = capsys.readouterr().out
    assert "| 4 | 1k | 300 |" in out and "bytes/entry" in out
    payload = json.loads(out_file.read_text())
    assert payload["decisions"][0]["endpoints"] == 4
    assert payload["index"]["entries"] == 600
