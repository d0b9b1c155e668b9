"""The demo in its quick form: it prints the table and the picker's hit rate beats round-robin's."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_quick_demo_prints_the_table_and_the_picker_wins() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "epp.demo", "--quick"],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for row in ("requests per server", "prefix-cache hit rate", "TTFT p50", "TTFT p90", "output tokens/s"):
        assert row in out
    assert "Envoy + picker" in out and "Envoy round-robin" in out
    (picker, baseline) = (
        float(x) for x in re.search(r"hit rate \|\s*([\d.]+)% \|\s*([\d.]+)%", out).groups()
    )
    assert picker > baseline, out
    assert "stopping everything" in out
