"""Fixtures of the deploy tests (helpers in ``_deploy_helm``).

``helm_python``: ``.venv-helm/bin/python``, created on first use. ``render``: a session-wide
:class:`HelmRenderer` (``render(chart, values, release=)`` returns the rendered objects or raises
:class:`HelmRenderError` with Helm's full message; ``render.prefetch(jobs)`` renders many at once).
``helm_lint(chart)`` returns Helm's lint result.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _deploy_helm import HelmRenderer, ensure_helm_venv, run_helm


@pytest.fixture(scope="session")
def helm_python() -> Path:
    return ensure_helm_venv()


@pytest.fixture(scope="session")
def render(helm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> HelmRenderer:
    return HelmRenderer(helm_python, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="session")
def helm_lint(helm_python: Path) -> Callable[[Path], dict[str, Any]]:
    def _lint(chart: Path) -> dict[str, Any]:
        result: dict[str, Any] = run_helm(helm_python, "lint", str(chart))["lint"]
        return result

    return _lint
