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
        [sys.executable, "-m", "devtools.demo", "--quick"],
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
    workdir = re.search(r"process logs in (\S+)", out)
    assert workdir is not None and not Path(workdir.group(1)).exists()  # its temporary folder is removed


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


_NOISE = ("Traceback", "Exception ignored", "never awaited", "Task was destroyed")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job `(cmd &)` starts it


def _interrupt_demo(trigger: str, *, sigint_ignored: bool) -> None:
    """Start the quick demo, send SIGINT once ``trigger`` is printed, check that it exits 130 with one
    line and no traceback, and that its processes and its /tmp/epp-stack-* folder are gone."""
    argv = [sys.executable, "-m", "devtools.demo", "--quick"]
    demo = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_ignore_sigint if sigint_ignored else None,  # no threads in this process
    )
    try:
        assert demo.stdout is not None
        seen = []
        for line in demo.stdout:
            seen.append(line)
            if trigger in line:
                break
        workdir = next(
            (m.group(1) for m in map(re.compile(r"process logs in (\S+)").search, seen) if m), None
        )
        children = _children(demo.pid)
        os.kill(demo.pid, signal.SIGINT)
        rest = "".join(seen) + demo.communicate(timeout=30)[0]
        assert demo.returncode == 130, rest
        assert "interrupted" in rest
        assert not [n for n in _NOISE if n in rest], rest
        deadline = time.monotonic() + 10
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c for c in children if _alive(c)]
        if trigger == "sending":
            assert len(children) >= 6  # four simulators, the picker, Envoy
            assert workdir is not None and Path(workdir).name.startswith("epp-stack-"), rest
        if workdir is not None:
            assert not Path(workdir).exists(), rest
    finally:
        if demo.poll() is None:
            demo.kill()


def test_ctrl_c_stops_everything_the_demo_started() -> None:
    _interrupt_demo("sending", sigint_ignored=False)


def test_ctrl_c_works_when_the_demo_was_started_with_sigint_ignored() -> None:
    """A background job inherits SIGINT ignored; the demo restores the default handler itself."""
    _interrupt_demo("sending", sigint_ignored=True)


@pytest.mark.parametrize(
    "trigger", ["starting 4 simulated", "starting the endpoint picker", "starting Envoy"]
)
def test_ctrl_c_while_starting_leaves_nothing_behind(trigger: str) -> None:
    _interrupt_demo(trigger, sigint_ignored=True)
