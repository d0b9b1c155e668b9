"""Static checks of the Dockerfile and .dockerignore: hadolint, and the packaging rules of the brief.

hadolint runs with ``--failure-threshold style``: the file is clean at every level, so any new finding,
even a style one (unpinned base tag, missing ``--no-install-recommends``, ...), fails the test and must
be fixed or ignored inline with a reason. Docker is not available here, so the structure is checked by
reading the file: multi-stage build, slim Python base, a numeric non-root USER in the final stage,
ENTRYPOINT ``epp``, a gRPC HEALTHCHECK, no compiler packages installed in the final stage, and a
``.dockerignore`` that lets in exactly what the build stage copies.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _deploy_dockerfile import docker_ignored, parse_dockerfile, read_dockerignore

ROOT = Path(__file__).resolve().parents[2]
HADOLINT = Path(sys.executable).with_name("hadolint")
COMPILERS = ("gcc", "g++", "clang", "build-essential", "cc", "make", "cargo", "rustc")


def hadolint(path: Path) -> tuple[int, list[dict[str, object]]]:
    proc = subprocess.run(
        [str(HADOLINT), "--no-color", "--format", "json", "--failure-threshold", "style", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout or "[]")


def test_hadolint_is_clean_at_every_level() -> None:
    rc, findings = hadolint(ROOT / "Dockerfile")
    assert findings == [] and rc == 0, findings


def test_hadolint_threshold_catches_style_findings(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.12-slim\nRUN apt-get update && apt-get install -y gcc\nUSER root\n")
    rc, findings = hadolint(bad)
    assert rc != 0
    assert {"DL3008", "DL3015", "DL3002"} <= {f["code"] for f in findings}


@pytest.fixture(scope="module")
def stages() -> list:
    _, parsed = parse_dockerfile((ROOT / "Dockerfile").read_text())
    return parsed


def test_multi_stage_slim_python_base(stages: list) -> None:
    assert len(stages) >= 2
    assert stages[0].name == "build"
    for stage in stages:
        assert stage.base.startswith("python:") and stage.base.endswith("-slim"), stage.base


def test_final_stage_runs_the_picker_as_non_root(stages: list) -> None:
    final = stages[-1]
    users = final.args("USER")
    assert users, "final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root UID (runAsNonRoot can check it)"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    assert json.loads(final.args("ENTRYPOINT")[-1]) == ["epp"]
    assert {"9002", "9003", "9090"} <= set(" ".join(final.args("EXPOSE")).split())


def test_final_stage_has_grpc_healthcheck(stages: list) -> None:
    (check,) = stages[-1].args("HEALTHCHECK")
    cmd = json.loads(check[check.index("CMD") + 3 :].strip())
    assert cmd[:2] == ["python", "-c"]
    assert "grpc_health.v1" in cmd[2] and "EPP_GRPC_HEALTH_PORT" in cmd[2]


def test_final_stage_installs_no_compiler_and_only_from_wheels(stages: list) -> None:
    final = stages[-1]
    for run in final.args("RUN"):
        words = shlex.split(run)
        assert not any(w in COMPILERS for w in words), run
        if "pip" in run and "install" in words:
            assert "--no-index" in words and "--find-links" in words, run
    assert not any(args.startswith("--from=build /src") for args in final.args("COPY")), "source copied"


def test_dockerignore_admits_exactly_what_the_build_copies(stages: list) -> None:
    patterns = read_dockerignore((ROOT / ".dockerignore").read_text())
    for args in stages[0].args("COPY"):
        sources = [s for s in shlex.split(args)[:-1] if not s.startswith("--")]
        for source in sources:
            assert not docker_ignored(source.rstrip("/"), patterns), f"{source} is excluded by .dockerignore"
            assert (ROOT / source).exists(), source
    for kept_out in (".venv/bin/python", ".git/HEAD", "tests/deploy/test_dockerfile.py", "docs/deploy.md"):
        assert docker_ignored(kept_out, patterns), kept_out
    assert docker_ignored("epp/__pycache__/cli.cpython-311.pyc", patterns)
    assert not docker_ignored("epp/cli.py", patterns)
