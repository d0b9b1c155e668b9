"""The full example in deploy/examples: valid manifests, and a README whose commands work.

Every object of the example manifests is validated (``_deploy_manifests``). The ``helm install``
commands of the README are parsed (release, chart, ``-f`` files, ``--set`` values) and rendered with
the real Helm library, their objects validated too, and the pieces must fit together: the rendered
InferencePool selects the vLLM pods and their port, the HTTPRoute's backend is that InferencePool and
its parent is the example Gateway.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from _deploy_helm import Renderer
from _deploy_manifests import by_kind, one, validate_object

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples"
README = EXAMPLES / "README.md"
MANIFESTS = sorted(p for p in EXAMPLES.glob("*.yaml") if not p.name.endswith("-values.yaml"))


def manifest_objects() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def set_value(values: dict[str, Any], dotted: str, raw: str) -> None:
    *parents, leaf = dotted.split(".")
    node = values
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = yaml.safe_load(raw)


def helm_installs(readme: str) -> list[tuple[str, Path, dict[str, Any]]]:
    """``(release, chart, values)`` of every ``helm install`` command in the README."""
    commands = re.findall(r"^helm install .*(?:\\\n.*)*", readme, flags=re.MULTILINE)
    installs = []
    for command in commands:
        words = shlex.split(command.replace("\\\n", " "))
        release, chart, rest = words[2], ROOT / words[3], words[4:]
        values: dict[str, Any] = {}
        for flag, arg in zip(rest[::2], rest[1::2], strict=True):
            if flag in ("-f", "--values"):
                loaded = yaml.safe_load((ROOT / arg).read_text()) or {}
                values = {**values, **loaded}
            elif flag == "--set":
                key, _, raw = arg.partition("=")
                set_value(values, key, raw)
            else:
                raise AssertionError(f"README: unsupported helm flag {flag} in {command!r}")
        installs.append((release, chart, values))
    return installs


@pytest.fixture(scope="module", autouse=True)
def _render_everything_up_front(render: Renderer) -> None:
    render.prefetch((chart, values, release) for release, chart, values in helm_installs(README.read_text()))


def test_example_manifests_are_valid() -> None:
    objects = manifest_objects()
    assert {o["kind"] for o in objects} == {"Deployment", "Gateway", "HTTPRoute"}
    for obj in objects:
        validate_object(obj)


def test_vllm_pods_request_gpus() -> None:
    deployment = one(manifest_objects(), "Deployment")
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert server["resources"]["requests"]["nvidia.com/gpu"] == "1"


def test_readme_has_the_helm_installs() -> None:
    charts = [chart.name for _, chart, _ in helm_installs(README.read_text())]
    assert charts.count("inferencepool") >= 2 and "standalone" in charts


@pytest.mark.parametrize("install", helm_installs(README.read_text()), ids=lambda i: f"{i[1].name}-{i[0]}")
def test_readme_helm_install(install: tuple[str, Path, dict[str, Any]], render: Renderer) -> None:
    release, chart, values = install
    rendered = render(chart, values, release=release)
    for obj in rendered:
        validate_object(obj)
    vllm = one(manifest_objects(), "Deployment")["spec"]["template"]
    pod_labels = vllm["metadata"]["labels"]
    pod_ports = {p["containerPort"] for c in vllm["spec"]["containers"] for p in c["ports"]}
    if chart.name == "standalone":
        args = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        selector = next(a for a in args if a.startswith("--endpoint-selector=")).partition("=")[2]
        assert dict(pair.split("=") for pair in selector.split(",")).items() <= pod_labels.items()
        return
    pool = one(rendered, "InferencePool")
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert {p["number"] for p in pool["spec"]["targetPorts"]} <= pod_ports
    route = one(manifest_objects(), "HTTPRoute")
    backends = [b for rule in route["spec"]["rules"] for b in rule["backendRefs"]]
    assert {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": release} in backends
    gateway = one(manifest_objects(), "Gateway")
    assert route["spec"]["parentRefs"][0]["name"] == gateway["metadata"]["name"]
    if values.get("inferenceObjectives"):
        names = {o["metadata"]["name"] for o in by_kind(rendered, "InferenceObjective")}
        assert "interactive" in names  # the README's curl uses it
