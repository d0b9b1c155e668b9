"""Shared helpers of the deploy tests: the Python 3.12 interpreter, free ports, bounded process stops.

``python312()`` finds CPython 3.12 (what the image's ``python:3.12-slim`` base and helm-sdkpy need): the
``PYEPP_PYTHON312`` environment variable, else ``$(pyenv root)/versions/3.12.*/bin/python3``. The pyenv
``python3.12`` shim is not used: it refuses to run outside a pyenv-selected directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

__all__ = ["free_port", "python312", "stop"]


def python312() -> Path:
    explicit = os.environ.get("PYEPP_PYTHON312")
    if explicit:
        return Path(explicit)
    roots: list[Path] = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        out = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=10, check=False)
        if out.returncode == 0 and out.stdout.strip():
            roots.append(Path(out.stdout.strip()))
    roots.append(Path.home() / ".pyenv")
    for root in roots:
        for candidate in sorted((root / "versions").glob("3.12.*/bin/python3"), reverse=True):
            if candidate.is_file():
                return candidate
    raise RuntimeError("CPython 3.12 not found: install it with pyenv or set PYEPP_PYTHON312=/path/python3")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    return int(proc.returncode)
