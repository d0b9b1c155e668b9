"""``datalayer.http`` is laid out httpx-style: a contract module and implementations that import only
the contract, never the package that re-exports them (no import cycle back into ``datalayer.http``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import datalayer.http

PACKAGE = Path(datalayer.http.__file__).parent
IMPLEMENTATIONS = sorted(p for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "base.py"))


def _datalayer_imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("datalayer"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("datalayer"))
    return out


def test_the_contract_imports_no_implementation() -> None:
    assert _datalayer_imports(PACKAGE / "base.py") == set()


@pytest.mark.parametrize("path", IMPLEMENTATIONS, ids=lambda p: p.name)
def test_each_implementation_imports_only_the_contract(path: Path) -> None:
    assert _datalayer_imports(path) == {"datalayer.http.base"}


def test_every_implementation_is_found() -> None:
    assert [p.name for p in IMPLEMENTATIONS] == ["aiohttp_client.py", "rawhttp.py"]
