"""Upstream's command-line flags, metric names and Helm chart keys, read from the git mirrors.

``python -m tests.compat.surface [MIRROR_ROOT]`` rewrites ``tests/compat/upstream/{flags,metrics,
chart_keys_inferencepool,chart_keys_standalone}.txt``: one name per line, ``name<TAB>where`` (the
repositories and files that define it). The
compatibility report compares these checked-in lists with what pyepp defines (:mod:`tests.compat.report`).

* flags: the ``fs.<Type>Var[P](&field, "name", ...)`` definitions of the EPP's ``Options.AddFlags``
  (``pkg/epp/server/options.go``) and of the logging options it adds
  (``pkg/common/observability/logging/options.go``), plus the five flags that controller-runtime's
  ``zap.Options.BindFlags`` adds there (:data:`ZAP_FLAGS`; that package is not in the mirrors);
* metrics: every ``prometheus.{Counter,Gauge,Histogram,Summary}Opts{Namespace, Subsystem, Name}`` and
  ``prometheus.NewDesc("name", ...)`` in the EPP's non-test Go files (``pkg/epp``, ``pkg/common``),
  the parts joined with ``_`` after resolving string constants of the repository;
* chart keys: the leaf keys (dotted paths; a list or an empty map is a leaf) of GIE's ``inferencepool``
  and ``standalone`` charts' ``values.yaml`` (only live YAML: commented-out examples do not count).
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.compat.collect import SOURCES, Source

__all__ = ["CHARTS", "UPSTREAM", "chart_keys", "flags", "load_list", "main", "metrics"]

UPSTREAM = Path(__file__).parent / "upstream"

# sigs.k8s.io/controller-runtime/pkg/log/zap Options.BindFlags: the flags it defines.
ZAP_FLAGS = ("zap-devel", "zap-encoder", "zap-log-level", "zap-stacktrace-level", "zap-time-encoding")

_EPP_SOURCES = ("gie", "llm-d-router")  # the EPPs whose flags and metrics are compared
CHARTS = ("inferencepool", "standalone")  # GIE's config/charts/<chart>, compared with deploy/helm/<chart>


def _git(source: Source, root: Path, *args: str) -> str:
    mirror = root / source.mirror / "repo"
    return subprocess.run(
        ["git", "-C", str(mirror), *args], check=True, capture_output=True, text=True
    ).stdout


def _files(source: Source, root: Path, pathspecs: Iterable[str]) -> Iterator[tuple[str, str]]:
    listing = _git(source, root, "ls-tree", "-r", "--name-only", source.rev, "--", *pathspecs)
    for path in listing.splitlines():
        if path.endswith(".go") and not path.endswith("_test.go"):
            yield path, _git(source, root, "show", f"{source.rev}:{path}")


_FLAG = re.compile(r"\bfs\.\w+?Var(?:P)?\(\s*&[\w.]+,\s*\"([\w-]+)\"")


def flags(root: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for source in (s for s in SOURCES if s.short in _EPP_SOURCES):
        specs = ("pkg/epp/server/options.go", "pkg/common/observability/logging/options.go")
        for path, text in _files(source, root, specs):
            for name in _FLAG.findall(text):
                found.setdefault(name, set()).add(f"{source.short}:{path}")
            if "BindFlags(" in text:
                for name in ZAP_FLAGS:
                    found.setdefault(name, set()).add(f"{source.short}:{path} (zap.Options.BindFlags)")
    return found


_CONST = re.compile(r"^\s*(?:const\s+)?(\w+)\s*=\s*\"([\w:]*)\"", re.MULTILINE)
_ALIAS = re.compile(r"^\s*(\w+)\s*=\s*\w+\.(\w+)\s*$", re.MULTILINE)
_OPTS = re.compile(r"prometheus\.(?:Counter|Gauge|Histogram|Summary)Opts\{(.*?)\n\s*\}", re.DOTALL)
_FIELD = re.compile(r"\b(Namespace|Subsystem|Name):\s*([\w.]+|\"[\w:]*\")")
_DESC = re.compile(r"prometheus\.NewDesc\(\s*\"([\w:]+)\"")


def metrics(root: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for source in (s for s in SOURCES if s.short in _EPP_SOURCES):
        files = dict(_files(source, root, ("pkg/epp", "pkg/common")))
        consts: dict[str, str] = {}
        for text in files.values():
            consts.update(dict(_CONST.findall(text)))
        for text in files.values():  # X = pkg.Y aliases of string constants
            for alias, target in _ALIAS.findall(text):
                if target in consts:
                    consts.setdefault(alias, consts[target])
        for path, text in files.items():
            local = {**consts, **dict(_CONST.findall(text))}
            names = list(_DESC.findall(text))
            for opts in _OPTS.findall(text):
                parts = dict(_FIELD.findall(opts))
                resolved = []
                for key in ("Namespace", "Subsystem", "Name"):
                    value = parts.get(key, '""')
                    value = value[1:-1] if value.startswith('"') else local.get(value.split(".")[-1], "?")
                    if value:
                        resolved.append(value)
                if "?" not in resolved and "Name" in parts:
                    names.append("_".join(resolved))
            for name in names:
                found.setdefault(name, set()).add(f"{source.short}:{path}")
    return found


def _leaves(value: Any, prefix: str) -> Iterator[str]:
    if isinstance(value, dict) and value:
        for key, sub in value.items():
            yield from _leaves(sub, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix


def chart_keys(root: Path, chart: str) -> dict[str, set[str]]:
    """The chart's value keys, with those of its local dependencies under their alias (GIE's charts take
    ``inferenceExtension.latencyPredictor.*`` from their ``epplib`` library, aliased
    ``inferenceExtension``, as Helm merges a dependency's values under its alias)."""
    source = next(s for s in SOURCES if s.short == "gie")
    base = f"config/charts/{chart}"
    path = f"{base}/values.yaml"
    values = yaml.safe_load(_git(source, root, "show", f"{source.rev}:{path}")) or {}
    found = {key: {f"gie:{path}"} for key in _leaves(values, "")}
    meta = yaml.safe_load(_git(source, root, "show", f"{source.rev}:{base}/Chart.yaml")) or {}
    for dep in meta.get("dependencies") or ():
        repo = str(dep.get("repository", ""))
        if not repo.startswith("file://"):
            continue
        dep_path = posixpath.normpath(f"{base}/{repo.removeprefix('file://')}/values.yaml")
        dep_values = yaml.safe_load(_git(source, root, "show", f"{source.rev}:{dep_path}")) or {}
        for key in _leaves(dep_values, str(dep.get("alias") or dep["name"])):
            found.setdefault(key, set()).add(f"gie:{dep_path}")
    return found


def load_list(kind: str) -> dict[str, str]:
    """The checked-in list ``upstream/<kind>.txt``: name -> where."""
    out: dict[str, str] = {}
    for line in (UPSTREAM / f"{kind}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, where = line.partition("\t")
            out[name] = where
    return out


def _write(kind: str, found: dict[str, set[str]], what: str) -> None:
    UPSTREAM.mkdir(exist_ok=True)
    lines = [
        f"# {what}",
        "# Generated by `python -m tests.compat.surface` from the upstream mirrors; do not edit.",
    ]
    lines += [f"{name}\t{', '.join(sorted(where))}" for name, where in sorted(found.items())]
    (UPSTREAM / f"{kind}.txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path("/work/.mirror")
    revs = ", ".join(f"{s.short}@{_git(s, root, 'rev-parse', s.rev).strip()[:12]}" for s in SOURCES[:3])
    _write("flags", flags(root), f"Upstream EPP command-line flags ({revs})")
    _write("metrics", metrics(root), f"Upstream EPP metric names ({revs})")
    for chart in CHARTS:
        _write(f"chart_keys_{chart}", chart_keys(root, chart), f"Upstream {chart} chart values keys ({revs})")
    for kind in ("flags", "metrics", *(f"chart_keys_{c}" for c in CHARTS)):
        print(kind, len(load_list(kind)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
