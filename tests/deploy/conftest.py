"""Fixtures of the deploy tests (helpers in ``_deploy_helm``).

``helm_python``: ``.venv-helm/bin/python``, created on first use. ``render(chart, values, release=)``
returns the objects of the manifest Helm renders (cached per session), or raises
:class:`HelmRenderError` with Helm's full message. ``helm_lint(chart)`` returns Helm's lint result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy_helm import NAMESPACE, HelmRenderError, Renderer, ensure_helm_venv, run_helm


@pytest.fixture(scope="session")
def helm_python() -> Path:
    return ensure_helm_venv()


@pytest.fixture(scope="session")
def render(helm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Renderer:
    cache: dict[str, list[dict[str, Any]]] = {}
    workdir = tmp_path_factory.mktemp("helm")

    def _render(chart: Path, values: dict[str, Any], release: str = "pool") -> list[dict[str, Any]]:
        key = json.dumps([str(chart), values, release], sort_keys=True)
        if key not in cache:
            values_file = workdir / f"values-{len(cache)}.json"
            values_file.write_text(json.dumps(values))
            out = run_helm(helm_python, "render", str(chart), release, NAMESPACE, str(values_file))
            if "error" in out:
                raise HelmRenderError(out["error"])
            cache[key] = [doc for doc in yaml.safe_load_all(out["manifest"]) if doc]
        return cache[key]

    return _render


@pytest.fixture(scope="session")
def helm_lint(helm_python: Path) -> Callable[[Path], dict[str, Any]]:
    def _lint(chart: Path) -> dict[str, Any]:
        result: dict[str, Any] = run_helm(helm_python, "lint", str(chart))["lint"]
        return result

    return _lint
