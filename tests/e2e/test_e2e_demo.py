"""The demo in its quick form: it prints the table and the picker's hit rate beats round-robin's."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

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


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ctrl_c_stops_everything_the_demo_started() -> None:
    argv = [sys.executable, "-m", "epp.demo", "--quick"]
    demo = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            if "sending" in line:
                break
        children = _children(demo.pid)
        assert len(children) >= 6  # four simulators, the picker, Envoy
        os.kill(demo.pid, signal.SIGINT)
        rest = demo.communicate(timeout=30)[0]
        assert demo.returncode == 130, rest
        assert "interrupted" in rest
        deadline = time.monotonic() + 10
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c for c in children if _alive(c)]
    finally:
        if demo.poll() is None:
            demo.kill()
