"""The README's "Using it" block, run exactly as written: it must stream a completion through Envoy.

The block is taken from README.md (the first ``sh`` block under "## Using it") and run by bash in the
repository root with real processes on the fixed ports it names. When one of those ports is taken by
another program the test is skipped, naming the ports. Whatever the block leaves running is killed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


def using_it_block() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Using it\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match is not None, "README.md: no ```sh block under ## Using it"
    return match.group(1)


def _busy(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind (TIME_WAIT is fine)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def test_the_block_states_how_to_get_the_commands_on_path_and_uses_fixed_local_ports() -> None:
    block = using_it_block()
    assert ". .venv/bin/activate" in block.splitlines()[0]
    assert "10.0.0." not in block  # only servers the block starts itself
    assert block.rstrip().splitlines()[-1].startswith("kill ")  # it stops what it started


def test_the_readme_block_streams_a_completion_through_envoy() -> None:
    block = using_it_block()
    missing = [tool for tool in ("bash", "curl", "make") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the README's block needs {', '.join(missing)}, not installed here")
    ports = sorted({int(p) for p in re.findall(r"\b(2\d{4})\b", block)})
    assert len(ports) >= 7, ports
    busy = [p for p in ports if _busy(p)]
    if busy:
        pytest.skip(f"the README's fixed ports {busy} are in use by another program")
    proc = subprocess.Popen(
        ["bash", "-c", block],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
    )
    try:
        out = proc.communicate(timeout=150)[0]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the block left behind
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, out
    assert "data: [DONE]" in out, out
    chunks = re.findall(r'^data: \{.*"text":"([^"]*)"', out, re.M)
    assert len(chunks) >= 2, out  # streamed, several chunks
    deadline = time.monotonic() + 15
    while [p for p in ports if _busy(p)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in ports if _busy(p)], "the block left a process listening"
