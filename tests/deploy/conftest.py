"""Fixtures of the deploy tests: the Helm virtualenv and a chart renderer.

``helm_python`` is ``.venv-helm/bin/python``: CPython 3.12 with helm-sdkpy (which needs Python >= 3.12;
the project runs on 3.11). It is created on first use; a stamp file written after the install marks
it complete, so an interrupted creation is redone by the next run. ``render(chart, values)`` runs
``_helm_render.py`` there and returns the manifest's objects, or raises :class:`HelmRenderError` with
Helm's full message. ``helm_lint(chart)`` returns Helm's lint result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy_tools import python312

ROOT = Path(__file__).resolve().parents[2]
HELM_VENV = ROOT / ".venv-helm"
HELM_REQUIREMENT = "helm-sdkpy>=0.1.32,<0.2"
RENDER_SCRIPT = Path(__file__).with_name("_helm_render.py")
NAMESPACE = "inference"


class HelmRenderError(Exception):
    """Helm refused to render the chart; the message is Helm's."""


def _ensure_helm_venv() -> Path:
    python = HELM_VENV / "bin" / "python"
    stamp = HELM_VENV / ".pyepp-helm-ready"
    if stamp.is_file() and stamp.read_text() == HELM_REQUIREMENT and python.exists():
        return python
    shutil.rmtree(HELM_VENV, ignore_errors=True)  # missing, half-made or another requirement
    subprocess.run([str(python312()), "-m", "venv", str(HELM_VENV)], check=True, timeout=120)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", HELM_REQUIREMENT], check=True, timeout=300
    )
    stamp.write_text(HELM_REQUIREMENT)  # written last: its presence means the install completed
    return python


@pytest.fixture(scope="session")
def helm_python() -> Path:
    return _ensure_helm_venv()


def _run_helm(helm_python: Path, *args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(helm_python), str(RENDER_SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"HELM_DRIVER": "memory"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


Renderer = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def render(helm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Renderer:
    cache: dict[str, list[dict[str, Any]]] = {}
    workdir = tmp_path_factory.mktemp("helm")

    def _render(chart: Path, values: dict[str, Any], release: str = "pool") -> list[dict[str, Any]]:
        key = json.dumps([str(chart), values, release], sort_keys=True)
        if key not in cache:
            values_file = workdir / f"values-{len(cache)}.json"
            values_file.write_text(json.dumps(values))
            out = _run_helm(helm_python, "render", str(chart), release, NAMESPACE, str(values_file))
            if "error" in out:
                raise HelmRenderError(out["error"])
            cache[key] = [doc for doc in yaml.safe_load_all(out["manifest"]) if doc]
        return cache[key]

    return _render


@pytest.fixture(scope="session")
def helm_lint(helm_python: Path) -> Callable[[Path], dict[str, Any]]:
    def _lint(chart: Path) -> dict[str, Any]:
        result: dict[str, Any] = _run_helm(helm_python, "lint", str(chart))["lint"]
        return result

    return _lint
