"""What the picker needs is declared as a runtime dependency; the extras are only for what they name.

Every module of the six packages is imported in a fresh interpreter whose imports of the ``sim``,
``bench`` and ``test`` extras' packages fail (a ``sys.meta_path`` hook), as in the container image,
which installs ``pyepp`` without extras. Modules that need an extra (the simulator's ZMQ events and
Hugging Face tokenizers, the benchmark's plots) import it where it is used, not at module import.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PACKAGES = ["scheduler", "datalayer", "epp", "simulator", "bench", "devtools"]

IMPORT_ALL = """
import importlib, pkgutil, sys

blocked = set(sys.argv[1].split(","))

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ImportError(f"{name} belongs to an extra")
        return None

sys.meta_path.insert(0, Block())
count = 0
for package in sys.argv[2:]:
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
            count += 1
print(count)
"""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_modules() -> set[str]:
    """Top-level modules that only the extras' own distributions install."""
    runtime = {_normal(Requirement(r).name) for r in PROJECT["dependencies"]}
    extras = {
        _normal(Requirement(r).name)
        for reqs in PROJECT["optional-dependencies"].values()
        for r in reqs
        if Requirement(r).name != PROJECT["name"]
    }
    assert not extras & runtime
    return {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if {_normal(d) for d in dists} <= extras
    }


def test_every_product_module_imports_without_the_extras() -> None:
    blocked = extra_modules()
    assert {"tokenizers", "matplotlib", "pytest", "hypothesis", "vllm_router"} <= blocked
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, ",".join(sorted(blocked)), *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) > 200  # every module was imported, not a few


def test_the_hook_does_block_an_extra() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL + "\nimport zmq\n", "zmq"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1 and "zmq belongs to an extra" in proc.stderr
