"""Layering: scheduler/ never imports epp/ or datalayer/; datalayer/ never imports epp/; nothing of the
product (epp/, scheduler/, datalayer/), nor the simulator, imports the benchmark (bench/) or the
development tooling (devtools/); those two may import the product."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("scheduler", ("epp", "datalayer", "bench", "simulator", "devtools")),
        ("datalayer", ("epp", "bench", "simulator", "devtools")),
        ("epp", ("bench", "devtools")),
        ("simulator", ("bench", "epp", "devtools")),
    ],
)
def test_no_upward_imports(package: str, forbidden: tuple[str, ...]) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files under {package}/"
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in sorted(imported_modules(path))
        if name.split(".")[0] in forbidden
    ]
    assert offenders == []


def test_checker_detects_forbidden_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import epp.server\nfrom datalayer import x\nfrom . import sibling\n")
    assert imported_modules(module) == {"epp.server", "datalayer"}
