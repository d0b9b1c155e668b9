"""epp-bench precise: the figures are computed from real work and printed as PASS/MISS lines."""

from __future__ import annotations

import pytest

from bench.precise_bench import entry_bytes, ingestion_us, keys_ms, main, pooled_ingestion_us


def test_figures_are_positive_and_plausible() -> None:
    assert 0 < ingestion_us(servers=4, batches=5, seed=1) < 1000
    assert 0 < pooled_ingestion_us(servers=4, batches=5, seed=1) < 1000
    assert 28 < entry_bytes(servers=2, blocks=300, seed=1) < 1000  # at least an int object per entry
    assert keys_ms(256, 128, seed=1, tokenize=False) >= 0


def test_main_prints_a_verdict_per_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--servers", "4", "--batches", "5", "--blocks", "300", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all(line.split()[0] in ("PASS", "MISS") for line in lines)
