"""Release files and packaging metadata agree with each other.

The version is written once (``pyproject.toml``): the installed package, both charts' ``appVersion`` and
the image tags in the docs follow it. ``constraints/minimums.txt`` pins every direct dependency at the
lower bound ``pyproject.toml`` declares (``make test-min`` installs them). The pre-commit hooks run the
same ruff and mypy, at the same versions, as ``make lint``. The Makefile's Python matrix covers the
versions the classifiers claim. LICENSE is the Apache-2.0 text the metadata names and is packaged
(the wheel itself is inspected by ``tests/deploy/test_image_install.py``, which builds it).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

import epp

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT: dict[str, Any] = PYPROJECT["project"]
VERSION = PROJECT["version"]
CHARTS = sorted(p.parent for p in (ROOT / "deploy" / "helm").glob("*/Chart.yaml"))
MAKEFILE = (ROOT / "Makefile").read_text()


def _requirements() -> list[Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in PROJECT["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra if Requirement(r).name != PROJECT["name"]]
    return reqs


def _lower_bound(req: Requirement) -> Version:
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
    assert len(bounds) == 1, f"{req}: one lower bound (>= or ==) expected"
    return bounds[0]


def _make_recipe(target: str) -> list[str]:
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert match, f"no recipe for {target} in the Makefile"
    return [line.strip() for line in match.group(1).splitlines()]


def test_version_is_the_installed_one_and_the_charts_app_version() -> None:
    assert epp.__version__ == VERSION
    assert len(CHARTS) == 2
    for chart in CHARTS:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        assert meta["appVersion"] == VERSION, f"{chart.name}/Chart.yaml appVersion"


def test_image_tags_in_docs_name_the_version() -> None:
    seen = 0
    for doc in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("deploy/**/*.md")]:
        text = doc.read_text()
        for tag in re.findall(r"pyepp:(\d+\.\d+\.\d+)", text) + re.findall(
            r"EPP_BUILD_REF=v(\d+\.\d+\.\d+)", text
        ):
            seen += 1
            assert tag == VERSION, f"{doc.relative_to(ROOT)} names version {tag}, not {VERSION}"
    assert seen >= 2


def test_changelog_follows_keep_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "keepachangelog.com" in text
    sections = re.findall(r"^## \[([^\]]+)\](.*)$", text, re.MULTILINE)
    assert sections and sections[0][0] in ("Unreleased", VERSION)
    for name, rest in sections:
        if name != "Unreleased":
            assert re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest), f"## [{name}] needs its release date"
        assert re.search(rf"^\[{re.escape(name)}\]: https://", text, re.MULTILINE), f"no link for [{name}]"
    kinds = set(re.findall(r"^### (.+)$", text, re.MULTILINE))
    assert kinds and kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    released = [name for name, _ in sections if name != "Unreleased"]
    assert VERSION in released or VERSION in text.split("\n## ", 2)[1], "the changelog does not name it"


def test_license_is_apache_2_and_packaged() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split("\n", 3)[1].strip() == "Apache License"
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(re.findall(r"^\s+\d+\. [A-Z]", text, re.MULTILINE)) == 9  # the nine sections
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    assert PYPROJECT["build-system"]["requires"][0] == "setuptools>=77"  # PEP 639 license-files
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY pyproject.toml README.md LICENSE \./$", dockerfile, re.MULTILINE)
    assert "!LICENSE" in (ROOT / ".dockerignore").read_text().splitlines()


def test_classifiers_urls_and_python_matrix_agree() -> None:
    classifiers = PROJECT["classifiers"]
    assert not [c for c in classifiers if c.startswith("License ::")], "PEP 639: the license field only"
    pythons = sorted(c.rsplit(" ", 1)[1] for c in classifiers if re.fullmatch(r".* :: 3\.\d+", c))
    assert pythons == ["3.11", "3.12", "3.13"]
    assert PROJECT["requires-python"] == f">={pythons[0]}"
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py" + pythons[0].replace(".", "")
    assert PYPROJECT["tool"]["mypy"]["python_version"] == pythons[0]
    recipe = _make_recipe("test-matrix")
    assert MAKEFILE.split("test-matrix:", 1)[1].split()[0] == "test-fast"  # the lowest: .venv
    assert recipe == [
        f'.venv-{v}/bin/pytest -q -p no:cacheprovider -m "not e2e and not slow"' for v in pythons[1:]
    ]
    assert "\nmake test-matrix </dev/null\n" in (ROOT / ".ci" / "test-matrix").read_text()
    for name in ("Homepage", "Source", "Issues", "Changelog", "Documentation"):
        assert PROJECT["urls"][name].startswith("https://github.com/pyepp/pyepp")
    for chart in CHARTS:
        assert yaml.safe_load((chart / "Chart.yaml").read_text())["home"] == PROJECT["urls"]["Homepage"]


def test_extras_and_what_make_install_installs() -> None:
    extras = PROJECT["optional-dependencies"]
    assert set(extras) == {"tokenizer", "sim", "bench", "test", "ngh2"}
    names = {e: {Requirement(r).name.lower() for r in reqs} for e, reqs in extras.items()}
    assert names["tokenizer"] == {"tokenizers", "jinja2"} and extras["sim"] == ["pyepp[tokenizer]"]
    runtime = {Requirement(r).name.lower() for r in PROJECT["dependencies"]}
    assert {"pyzmq", "msgpack"} <= runtime  # the picker's precise-prefix plugins subscribe to KV events
    assert {"pyepp", "matplotlib", "vllm-router"} <= names["bench"]  # bench runs the simulator: sim
    assert {"pytest", "ruff", "mypy"} <= names["test"]
    assert names["ngh2"] == {"ngh2"} and "pyepp[ngh2]" in extras["test"]  # the ngh2 engine: optional
    assert not {"pytest", "hypothesis", "matplotlib", "tokenizers", "ngh2"} & runtime
    assert "-e '.[test,sim,bench]'" in "\n".join(_make_recipe("$(STAMP)"))


def test_minimum_constraints_pin_every_direct_dependency_at_its_lower_bound() -> None:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints" / "minimums.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            assert req.name.lower() not in pins, f"{req.name} pinned twice"
            pins[req.name.lower()] = Version(spec.version)
    declared = {r.name.lower(): _lower_bound(r) for r in _requirements()}
    assert set(pins) == set(declared), set(pins) ^ set(declared)
    for name, bound in declared.items():
        assert pins[name] == bound, f"{name}: pyproject says >={bound}, constraints pin {pins[name]}"
    recipe = "\n".join(_make_recipe(".venv-min/.installed"))
    assert "-c constraints/minimums.txt -e '.[test,sim,bench]'" in recipe
    assert _make_recipe("test-min") == [
        '.venv-min/bin/pytest -q -p no:cacheprovider -m "not e2e and not slow"'
    ]
    assert "\nmake test-min </dev/null\n" in (ROOT / ".ci" / "test-min").read_text()  # the CI job


def test_xds_protos_minimum_matches_what_it_requires() -> None:
    """xds-protos generates the Envoy messages; its grpcio/protobuf floors are ours (docs/dependencies.md)."""
    declared = {r.name.lower(): _lower_bound(r) for r in _requirements()}
    assert declared["xds-protos"] >= Version("1.80")  # ProcessingRequest.protocol_config
    assert declared["protobuf"] >= Version("7.35.1")  # grpcio-health-checking 1.85 requires it
    assert declared["grpcio"] >= Version("1.85")  # Health.List
    assert declared["grpcio-health-checking"] == declared["grpcio"]


def _hooks() -> dict[str, tuple[str, dict[str, Any]]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    return {
        hook["id"]: (repo["repo"], {**repo, **hook}) for repo in config["repos"] for hook in repo["hooks"]
    }


def test_pre_commit_runs_what_make_lint_runs_at_the_pinned_versions() -> None:
    pinned = {Requirement(r).name: Requirement(r) for r in PROJECT["optional-dependencies"]["test"]}
    ruff_version = str(next(iter(pinned["ruff"].specifier)))
    mypy_version = str(next(iter(pinned["mypy"].specifier)))
    assert ruff_version.startswith("==") and mypy_version.startswith("=="), "lint tools are pinned"
    hooks = _hooks()
    assert set(hooks) == {"ruff-check", "ruff-format", "mypy"}
    lint = _make_recipe("lint")
    assert lint == ["$(BIN)/ruff check .", "$(BIN)/ruff format --check .", "$(BIN)/mypy"]
    repo, ruff_check = hooks["ruff-check"]
    assert repo == "https://github.com/astral-sh/ruff-pre-commit"
    assert ruff_check["rev"] == "v" + ruff_version.removeprefix("==")
    assert "--fix" not in ruff_check.get("args", [])
    assert hooks["ruff-format"][1]["rev"] == ruff_check["rev"]
    assert hooks["ruff-format"][1]["args"] == ["--check"]
    repo, mypy = hooks["mypy"]
    assert repo == "local" and mypy["language"] == "system"
    assert (
        mypy["entry"] == ".venv/bin/mypy" == lint[2].replace("$(BIN)", ".venv/bin")
    )  # mypy==pinned, in .venv
    assert mypy["pass_filenames"] is False  # the packages listed in [tool.mypy], as make lint
