"""The Helm side of the deploy tests: the ``.venv-helm`` virtualenv and calls into it.

``ensure_helm_venv()`` returns ``.venv-helm/bin/python``: CPython 3.12 with helm-sdkpy (which needs
Python >= 3.12; the project runs on 3.11). It is created on first use under an exclusive file lock (two
test runs never build it at once); a stamp file written after the install marks it complete, so an
interrupted creation is redone by the next run. ``run_helm(python, *args)`` runs ``_helm_render.py``
there (``render-many JOBS_FILE`` or ``lint CHART``) and returns its JSON answer.

:class:`HelmRenderer` renders charts and caches the objects per (chart, values, release).
``prefetch(jobs)`` renders many at once in one Helm process (concurrently: a Helm install spends most
of its second waiting), so a test module renders everything it needs up front.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from _deploy_tools import python312

__all__ = [
    "HELM_REQUIREMENT",
    "NAMESPACE",
    "HelmRenderError",
    "HelmRenderer",
    "Renderer",
    "ensure_helm_venv",
    "run_helm",
]

ROOT = Path(__file__).resolve().parents[2]
HELM_VENV = ROOT / ".venv-helm"
HELM_REQUIREMENT = "helm-sdkpy>=0.1.32,<0.2"
RENDER_SCRIPT = Path(__file__).with_name("_helm_render.py")
NAMESPACE = "inference"


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


def run_helm(python: Path, *args: str) -> Any:
    proc = subprocess.run(
        [str(python), str(RENDER_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"HELM_DRIVER": "memory"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


Job = tuple[Path, dict[str, Any], str]  # chart, values, release

TRANSPORT_ATTEMPTS = 3
_TRANSPORT_ERRORS = ("connection reset by peer", "connection refused", "broken pipe", "i/o timeout", ": EOF")


def _transport_error(message: str) -> bool:
    """Whether a render failed on the way to helm-sdkpy's in-memory API server (seen once on a loaded
    machine: ``read: connection reset by peer``) rather than on the chart: such renders are tried again."""
    return message.startswith("install failed: Post ") and any(e in message for e in _TRANSPORT_ERRORS)


class HelmRenderer:
    def __init__(self, python: Path, workdir: Path) -> None:
        self._python = python
        self._workdir = workdir
        self._cache: dict[str, list[dict[str, Any]] | str] = {}

    @staticmethod
    def _key(chart: Path, values: dict[str, Any], release: str) -> str:
        return json.dumps([str(chart), values, release], sort_keys=True)

    def prefetch(self, jobs: Iterable[Job]) -> None:
        todo = {self._key(*job): job for job in jobs if self._key(*job) not in self._cache}
        if not todo:
            return
        payload = [
            {"chart": str(chart), "release": release, "namespace": NAMESPACE, "values": values}
            for chart, values, release in todo.values()
        ]
        for attempt in range(TRANSPORT_ATTEMPTS):
            jobs_file = self._workdir / f"jobs-{len(self._cache)}-{attempt}.json"
            jobs_file.write_text(json.dumps(payload))
            results = run_helm(self._python, "render-many", str(jobs_file))
            retry: dict[str, Job] = {}
            last = attempt + 1 == TRANSPORT_ATTEMPTS
            for (key, job), out in zip(todo.items(), results, strict=True):
                if "error" in out and _transport_error(str(out["error"])) and not last:
                    retry[key] = job  # the in-process API server dropped a connection: not Helm's verdict
                elif "error" in out:
                    self._cache[key] = str(out["error"])
                else:
                    self._cache[key] = [doc for doc in yaml.safe_load_all(out["manifest"]) if doc]
            if not retry:
                return
            todo = retry
            payload = [
                {"chart": str(chart), "release": release, "namespace": NAMESPACE, "values": values}
                for chart, values, release in todo.values()
            ]

    def __call__(self, chart: Path, values: dict[str, Any], release: str = "pool") -> list[dict[str, Any]]:
        """The rendered objects; HelmRenderError with Helm's message when Helm refuses."""
        key = self._key(chart, values, release)
        if key not in self._cache:
            self.prefetch([(chart, values, release)])
        found = self._cache[key]
        if isinstance(found, str):
            raise HelmRenderError(found)
        return found


Renderer = HelmRenderer
