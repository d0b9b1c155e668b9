"""The Helm side of the deploy tests: the ``.venv-helm`` virtualenv and calls into it.

``ensure_helm_venv()`` returns ``.venv-helm/bin/python``: CPython 3.12 with helm-sdkpy (which needs
Python >= 3.12; the project runs on 3.11). It is created on first use under an exclusive file lock (two
test runs never build it at once); a stamp file written after the install marks it complete, so an
interrupted creation is redone by the next run. ``run_helm(python, *args)`` runs ``_helm_render.py``
there (``render ...`` or ``lint CHART``) and returns its JSON answer.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _deploy_tools import python312

__all__ = [
    "HELM_REQUIREMENT",
    "NAMESPACE",
    "HelmRenderError",
    "Renderer",
    "ensure_helm_venv",
    "run_helm",
]

ROOT = Path(__file__).resolve().parents[2]
HELM_VENV = ROOT / ".venv-helm"
HELM_REQUIREMENT = "helm-sdkpy>=0.1.32,<0.2"
RENDER_SCRIPT = Path(__file__).with_name("_helm_render.py")
NAMESPACE = "inference"

Renderer = Callable[..., list[dict[str, Any]]]


class HelmRenderError(Exception):
    """Helm refused to render the chart; the message is Helm's."""


def ensure_helm_venv() -> Path:
    python = HELM_VENV / "bin" / "python"
    stamp = HELM_VENV / ".pyepp-helm-ready"
    lock_name = hashlib.sha256(str(HELM_VENV).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"pyepp-venv-helm-{lock_name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == HELM_REQUIREMENT and python.exists():
            return python
        shutil.rmtree(HELM_VENV, ignore_errors=True)  # missing, half-made or another requirement
        subprocess.run([str(python312()), "-m", "venv", str(HELM_VENV)], check=True, timeout=120)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", HELM_REQUIREMENT], check=True, timeout=300
        )
        stamp.write_text(HELM_REQUIREMENT)  # written last: its presence means the install completed
    return python


def run_helm(python: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(python), str(RENDER_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"HELM_DRIVER": "memory"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
