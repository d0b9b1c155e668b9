"""Runs the Dockerfile's install steps outside Docker and starts the installed picker.

No Docker engine runs here, so this test does what the two stages do, with the Dockerfile's own
commands: the build context is assembled from the build stage's COPY lines (filtered by
``.dockerignore``), the build stage's RUN line runs in a fresh CPython 3.12 virtualenv (the image's
``python:3.12-slim``) with ``/src`` and ``/wheels`` mapped to temporary directories, then the final
stage's RUN line (its ``--mount`` bind of ``/wheels`` mapped the same way, ``/opt/epp`` to a temporary
directory) creates the runtime virtualenv and installs with ``--no-index`` from those wheels only.
One deviation: ``PIP_NO_CACHE_DIR`` is dropped so that pip's local cache serves the downloads. The build
stage runs once, with ``EPP_EXTRAS=tokenizer`` (its wheels are a superset of the default build's); the
final stage runs twice from those wheels: with the default ``EPP_EXTRAS`` (the image every test below
checks) and with ``EPP_EXTRAS=tokenizer`` (the in-process tokenizer loads there, and is refused with a
message naming the build argument in the default image).

From that virtualenv it runs ``epp --help``, then a real picker against a tiny metrics server, probes
the gRPC health port with the Dockerfile's HEALTHCHECK command until it reports SERVING, stops the
picker with SIGTERM, and checks that nothing was written into the installed tree (the image runs with
a read-only root filesystem).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _deploy_dockerfile import Stage, docker_ignored, parse_dockerfile, read_dockerignore
from _deploy_tools import free_port, model_server, python312, stop
from testutil import write_tokenizer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _env_of(
    stage: Stage, base: dict[str, str], paths: dict[str, Path], build_args: dict[str, str] | None = None
) -> dict[str, str]:
    """The stage's ARGs (their defaults, or ``build_args``; RUN sees them as variables) and ENV on top of
    ``base``: ``$PATH`` and the ARGs expanded in ENV values."""
    env = dict(base)
    variables = {"PATH": base.get("PATH", "")}
    defaults = _global_args()
    for args in stage.args("ARG"):
        name, _, default = args.partition("=")
        value = (build_args or {}).get(name, default or defaults.get(name, ""))
        variables[name] = env[name] = value.strip('"')
    for args in stage.args("ENV"):
        for item in shlex.split(args):
            key, _, value = item.partition("=")
            value = re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), value)
            for image_path, host_path in paths.items():
                value = value.replace(image_path, str(host_path))
            env[key] = value
    env.pop("PIP_NO_CACHE_DIR", None)
    return env


def _host_command(run: str, python: Path, paths: dict[str, Path]) -> str:
    words = run.split(" ")
    while words and words[0].startswith("--"):  # RUN options such as --mount=type=bind,...
        words.pop(0)
    command = " ".join(words)
    for image_path, host_path in paths.items():
        command = re.sub(re.escape(image_path) + r"(?=[/\s]|$)", str(host_path), command)
    return re.sub(r"(^|&&\s*)python(?=\s)", lambda m: m.group(1) + shlex.quote(str(python)), command)


def _global_args() -> dict[str, str]:
    """The ARGs declared before the first FROM, with their defaults (a stage's bare ``ARG X`` gets it)."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    head = lines[: next(i for i, line in enumerate(lines) if line.startswith("FROM "))]
    return dict(line.split(None, 1)[1].partition("=")[::2] for line in head if line.startswith("ARG "))


def _run(command: str, *, cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


Image = tuple[Path, dict[str, str], Stage]
Built = tuple[Path, dict[str, str], Stage]  # the temporary root, the host environment, the final stage


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The build stage, run with ``EPP_EXTRAS=tokenizer``: ``/wheels`` has every wheel either image needs."""
    tmp = tmp_path_factory.mktemp("image")
    _, stages = parse_dockerfile((ROOT / "Dockerfile").read_text())
    build, final = stages[0], stages[-1]
    ignore = read_dockerignore((ROOT / ".dockerignore").read_text())
    src = tmp / "src"
    paths = {"/src": src, "/wheels": tmp / "wheels"}
    src.mkdir()
    for args in build.args("COPY"):
        *sources, dest = shlex.split(args)
        for source in sources:
            origin = ROOT / source
            files = [origin] if origin.is_file() else sorted(p for p in origin.rglob("*") if p.is_file())
            for file in files:
                rel = file.relative_to(ROOT).as_posix()
                if docker_ignored(rel, ignore):
                    continue
                target = src / dest / (file.name if origin.is_file() else file.relative_to(origin))
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, target)
    base_python = tmp / "base-python"
    subprocess.run([str(python312()), "-m", "venv", str(base_python)], check=True, timeout=120)
    host_env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    build_env = _env_of(build, host_env, paths, {"EPP_EXTRAS": "tokenizer"})
    for run in build.args("RUN"):
        _run(_host_command(run, base_python / "bin" / "python", paths), cwd=src, env=build_env)
    assert any(p.name.startswith("pyepp-") for p in (tmp / "wheels").glob("*.whl"))
    assert any(p.name.startswith("tokenizers-") for p in (tmp / "wheels").glob("*.whl"))
    return tmp, host_env, final


def _install(built: Built, name: str, build_args: dict[str, str]) -> Image:
    """The final stage's RUN lines, into ``<tmp>/<name>/opt/epp``, with ``build_args``."""
    tmp, host_env, final = built
    root = tmp / name
    paths = {"/wheels": tmp / "wheels", "/opt/epp": root / "opt" / "epp"}
    (root / "opt").mkdir(parents=True)
    final_env = _env_of(final, host_env, paths, build_args)
    for run in final.args("RUN"):
        _run(_host_command(run, tmp / "base-python" / "bin" / "python", paths), cwd=root, env=final_env)
    return paths["/opt/epp"], final_env, final


@pytest.fixture(scope="module")
def image(built: Built) -> Image:
    """The installed runtime virtualenv of the default image, the runtime environment and the final stage."""
    return _install(built, "default", {})


@pytest.fixture(scope="module")
def tokenizer_image(built: Built) -> Image:
    """The same, built with ``--build-arg EPP_EXTRAS=tokenizer``."""
    return _install(built, "tokenizer", {"EPP_EXTRAS": "tokenizer"})


@pytest.fixture
def model_server_port() -> Iterator[int]:
    with model_server() as server:
        yield server.port


def test_installed_tree_has_no_compiler_and_only_runtime_packages(image: Image) -> None:
    venv, env, _ = image
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"pyepp", "grpcio", "grpcio-health-checking", "xds-protos"} <= names
    assert not names & {"pytest", "ruff", "mypy", "setuptools", "wheel", "cython"}, names
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {  # the image is the picker: none of the sim, bench and test extras
        re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0]).lower()
        for reqs in project["optional-dependencies"].values()
        for req in reqs
    } - {"pyepp"}
    assert {"tokenizers", "matplotlib", "vllm-router"} <= extras
    assert not names & extras, names & extras
    # Byte code is compiled at install time: on a read-only root filesystem nothing could write it later.
    (site,) = venv.glob("lib/python3*/site-packages")
    sources = list((site / "epp").rglob("*.py"))
    compiled = {p.name.split(".")[0] for p in (site / "epp").rglob("__pycache__/*.pyc")}
    assert sources and {p.stem for p in sources} <= compiled


def test_the_wheel_carries_the_license(built: Built) -> None:
    (wheel,) = (built[0] / "wheels").glob("pyepp-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        licenses = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1, archive.namelist()
        assert archive.read(licenses[0]) == (ROOT / "LICENSE").read_bytes()
        metadata = archive.read(licenses[0].replace("licenses/LICENSE", "METADATA")).decode()
    assert "License-Expression: Apache-2.0" in metadata and "License-File: LICENSE" in metadata


def test_epp_help_runs_from_the_installed_tree(image: Image) -> None:
    venv, env, final = image
    assert json.loads(final.args("ENTRYPOINT")[-1]) == ["epp"]
    out = subprocess.run(
        [str(venv / "bin" / "epp"), "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    for flag in ("--grpc-port", "--grpc-health-port", "--pool-name", "--endpoint-selector", "--endpoints"):
        assert flag in out.stdout


def _snapshot(tree: Path) -> dict[str, tuple[int, float]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime) for p in tree.rglob("*") if p.is_file()}


def test_picker_serves_grpc_health_from_the_installed_tree(
    image: Image, model_server_port: int, tmp_path: Path
) -> None:
    pytest.importorskip("epp.app", reason="the picker's server (epp.app) has not landed yet")
    venv, env, final = image
    (check,) = final.args("HEALTHCHECK")
    probe = json.loads(check[check.index("CMD") + 3 :].strip())
    ports = {name: free_port() for name in ("grpc", "health", "metrics")}
    run_env = dict(env, EPP_GRPC_HEALTH_PORT=str(ports["health"]), HOME=str(tmp_path), TMPDIR=str(tmp_path))
    before = _snapshot(venv)
    log = (tmp_path / "epp.log").open("wb")
    proc = subprocess.Popen(
        [
            str(venv / "bin" / "epp"),
            f"--endpoints=127.0.0.1:{model_server_port}",
            "--secure-serving=false",
            "--host=127.0.0.1",
            f"--grpc-port={ports['grpc']}",
            f"--grpc-health-port={ports['health']}",
            f"--metrics-port={ports['metrics']}",
        ],
        env=run_env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 40
        healthy = False
        while time.monotonic() < deadline and proc.poll() is None:
            probed = subprocess.run(
                [str(venv / "bin" / probe[0]), *probe[1:]], env=run_env, capture_output=True, timeout=20
            )
            if probed.returncode == 0:
                healthy = True
                break
            time.sleep(0.5)
        assert healthy, (tmp_path / "epp.log").read_text()[-4000:]
    finally:
        rc = stop(proc)
        log.close()
    assert rc == 0, (tmp_path / "epp.log").read_text()[-4000:]
    assert _snapshot(venv) == before, "the picker wrote into its installed tree"


def test_the_in_process_tokenizer_needs_the_tokenizer_build(
    image: Image, tokenizer_image: Image, tmp_path: Path
) -> None:
    """``indexerConfig.tokenizersPoolConfig``: refused in the default image with a message naming the
    build argument; loaded (and the config accepted) in the image built with ``EPP_EXTRAS=tokenizer``."""
    tokenizer = write_tokenizer(tmp_path / "model", ["alpha beta gamma delta"], vocab_size=40)
    config = tmp_path / "precise.yaml"
    config.write_text(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
        "- type: precise-prefix-cache-scorer\n  parameters:\n    indexerConfig:\n"
        "      tokenizersPoolConfig:\n        modelName: m\n"
        f"        local: {{modelTokenizerMap: {{m: {tokenizer}}}}}\n"
    )

    def check(built_image: Image) -> subprocess.CompletedProcess[str]:
        venv, env, _ = built_image
        return subprocess.run([str(venv / "bin" / "epp"), "check-config", str(config)], env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    refused = check(image)
    assert refused.returncode == 2, refused  # an invalid configuration
    assert "'tokenizers' package is not installed" in refused.stderr, refused.stderr
    assert "--build-arg EPP_EXTRAS=tokenizer" in refused.stderr, refused.stderr
    accepted = check(tokenizer_image)
    assert accepted.returncode == 0, accepted.stderr
    listed = subprocess.run([str(tokenizer_image[0] / "bin" / "python"), "-m", "pip", "list", "--format",
                             "json"], env=tokenizer_image[1], capture_output=True, text=True, timeout=60,
                            check=True)  # fmt: skip
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"tokenizers", "jinja2", "pyepp"} <= names and not names & {"matplotlib", "vllm-router", "pytest"}
