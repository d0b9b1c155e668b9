"""Collect every EndpointPickerConfig document from the upstream git mirrors into ``tests/compat/corpus``.

Run ``python -m tests.compat.collect [MIRROR_ROOT]`` (default ``/work/.mirror``) to refresh the corpus; it
rewrites ``tests/compat/corpus/<repo>/*.yaml`` and ``tests/compat/corpus/manifest.yaml`` and prints a
summary. The mirrors are bare git repositories read with ``git show`` / ``git grep`` at one commit per
repository (:data:`SOURCES`).

What is collected: every file that contains ``kind: EndpointPickerConfig`` at that commit, and in it

* YAML files: each document whose ``kind`` is ``EndpointPickerConfig``, and each string value of any
  other document (a ConfigMap's ``data``, a Helm values file's ``pluginsCustomConfig``) that holds one;
* Helm templates: the config map they define, rendered with the chart's default values by
  :func:`render_template` (every template action the templates use is listed in :data:`HELM_ACTIONS`
  with its value under the defaults; an action not listed stops the refresh);
* Markdown: each fenced code block that holds one (blocks are dedented first);
* Go: each raw string literal that holds one as a whole document (format strings are skipped).

A fragment (a block without ``apiVersion``/``kind``) is not a document and is not collected. Exact
duplicates (same text after dedent and strip) are stored once; the header lists the other places.

The expectation of each file (does upstream LOAD or REJECT it, and why) is computed by :func:`expect`
from where it came from: shipped configs (deploy/, docs, charts, e2e and integration tests) load; the
loader tests' fixtures follow their Go test table (``success*`` constants load, ``error*`` constants are
rejected) and the hand-read verdicts of :data:`GO_VERDICTS`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SOURCES", "Extracted", "Source", "collect", "main"]

CORPUS = Path(__file__).parent / "corpus"
KIND_RE = re.compile(r"^\s*kind:\s*EndpointPickerConfig\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Source:
    short: str  # directory name under corpus/
    mirror: str  # directory name under the mirror root
    url: str
    rev: str  # a commit, or HEAD
    why: str  # why this commit


SOURCES: tuple[Source, ...] = (
    Source(
        "gie",
        "kubernetes-sigs+gateway-api-inference-extension",
        "https://github.com/kubernetes-sigs/gateway-api-inference-extension",
        "1748e829d1161147aaf35e76699ec86fd88406d2",
        "the last commit with pkg/epp (its child a70292c1 removed the EPP)",
    ),
    Source(
        "llm-d-inference-scheduler",
        "llm-d+llm-d-inference-scheduler",
        "https://github.com/llm-d/llm-d-inference-scheduler",
        "HEAD",
        "the mirror's HEAD",
    ),
    Source(
        "llm-d-router",
        "llm-d+llm-d-router",
        "https://github.com/llm-d/llm-d-router",
        "HEAD",
        "the mirror's HEAD",
    ),
    Source("llm-d", "llm-d+llm-d", "https://github.com/llm-d/llm-d", "HEAD", "the mirror's HEAD"),
)


@dataclass(slots=True)
class Extracted:
    source: Source
    commit: str
    path: str
    how: str  # how it was extracted
    text: str
    duplicates: list[str] = field(default_factory=list)
    filename: str = ""


def _git(mirror: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(mirror), *args], check=True, capture_output=True, text=True
    ).stdout


def _normal(text: str) -> str:
    return textwrap.dedent(text).strip("\n").rstrip() + "\n"


# --- YAML --------------------------------------------------------------------------------------------

_DOC_SPLIT = re.compile(r"^---[ \t]*(?:#.*)?$", re.MULTILINE)


def yaml_documents(text: str) -> Iterator[tuple[str, str]]:
    """(how, document text) for every EndpointPickerConfig in a YAML stream, embedded strings included."""
    for i, doc in enumerate(_DOC_SPLIT.split(text)):
        if not KIND_RE.search(doc):
            continue
        where = f"YAML document {i + 1}" if len(_DOC_SPLIT.split(text)) > 1 else "the file"
        try:
            value = yaml.safe_load(doc)
        except yaml.YAMLError:  # e.g. a manifest with "..." placeholders around an embedded config
            for line, block in _block_scalars(doc):
                for how, sub in yaml_documents(block):
                    yield (
                        f"{where} (not valid YAML), block scalar at line {line}"
                        + ("" if how == "the file" else f", {how}"),
                        sub,
                    )
            continue
        if isinstance(value, dict) and value.get("kind") == "EndpointPickerConfig":
            yield where, _normal(doc)
            continue
        for key, embedded in _strings(value, ""):
            for how, sub in yaml_documents(embedded):
                yield f"{where}, string at {key}" + ("" if how == "the file" else f", {how}"), sub


_BLOCK_START = re.compile(r"^( *)(?:- |[\w.-]+: )?\|[-+]?\s*$")


def _block_scalars(text: str) -> Iterator[tuple[int, str]]:
    """(line number, dedented text) of each literal block scalar (``key: |`` / ``- |``) holding a config."""
    lines = text.splitlines()
    for n, line in enumerate(lines):
        start = _BLOCK_START.match(line)
        if not start:
            continue
        indent = len(start.group(1))
        body = []
        for follow in lines[n + 1 :]:
            if follow.strip() and len(follow) - len(follow.lstrip(" ")) <= indent:
                break
            body.append(follow)
        block = textwrap.dedent("\n".join(body))
        if KIND_RE.search(block):
            yield n + 1, block


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        if KIND_RE.search(value):
            yield path or ".", value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


# --- Markdown ----------------------------------------------------------------------------------------

_FENCE = re.compile(r"^([ \t]*)(```|~~~)[^\n]*\n(.*?)^[ \t]*\2[ \t]*$", re.MULTILINE | re.DOTALL)


def markdown_documents(text: str) -> Iterator[tuple[str, str]]:
    for n, m in enumerate(_FENCE.finditer(text), 1):
        body = textwrap.dedent(m.group(3))
        for how, doc in yaml_documents(body):
            yield f"Markdown code block {n}" + ("" if how == "the file" else f", {how}"), doc


# --- Go ----------------------------------------------------------------------------------------------

_GO_RAW = re.compile(r"`([^`]*)`", re.DOTALL)
_GO_NAME = re.compile(r"(?:const|var)?\s*(\w+)\s*(?::=|=)\s*$|(\w+):\s*$")
_GO_CASE = re.compile(r'name:\s*"([^"]+)"')


def go_documents(text: str) -> Iterator[tuple[str, str]]:
    for m in _GO_RAW.finditer(text):
        body = m.group(1)
        if not KIND_RE.search(body) or re.search(r"%[sdvq]", body):
            continue
        before = text[: m.start()]
        line = before.count("\n") + 1
        head = before.rsplit("\n", 1)[-1]
        named = _GO_NAME.search(head)
        label = (named.group(1) or named.group(2)) if named else ""
        cases = _GO_CASE.findall(before[-3000:])
        if label in ("", "configText", "ConfigText", "config", "text", "yaml") and cases:
            label = f"{label} of case {cases[-1]!r}" if label else f"case {cases[-1]!r}"
        for how, doc in yaml_documents(body):
            where = f"Go raw string literal {label or '(unnamed)'} at line {line}"
            yield where + ("" if how == "the file" else f", {how}"), doc


# --- Helm --------------------------------------------------------------------------------------------

# Every template action of the charts' config templates, and its value under the chart's default values
# (read from the chart's values.yaml at the collected commit). Conditions map to booleans, output
# actions to their text, assignments to None (their effect is folded into the conditions and outputs
# that read them). A template action not listed here stops the refresh.
_GIE_DEFAULTS = (
    "inferencePool.modelServerType=vllm, inferencePool.modelServerProtocol=http, inferencePool.parser='', "
    "inferenceExtension.metricsDataSource={scheme: http, path: /metrics, insecureSkipVerify: true}, "
    "inferenceExtension.latencyPredictor.enabled=false, no endpointsServer (inferencepool chart)"
)
_ROUTER_DEFAULTS = (
    "router.modelServers.type=vllm, router.modelServers.protocol=http, router.epp.parsers=[], "
    "router.epp.metricsDataSource={scheme: http, path: /metrics, insecureSkipVerify: true}, "
    "router.latencyPredictor.enabled=false (llm-d-router-gateway chart)"
)
HELM_ACTIONS: dict[str, Any] = {
    # epplib (GIE and llm-d-inference-scheduler)
    '$modelServerProtocol := "http"': None,
    '$modelServerType := "vllm"': None,
    "if and .Values.inferenceExtension.endpointsServer (not .Values.inferenceExtension.endpointsServer"
    ".createInferencePool)": False,
    "$modelServerProtocol = .Values.inferenceExtension.endpointsServer.modelServerProtocol"
    ' | default "http"': None,
    '$modelServerType = .Values.inferenceExtension.endpointsServer.modelServerType | default "vllm"': None,
    "else if .Values.inferencePool": True,
    '$modelServerProtocol = .Values.inferencePool.modelServerProtocol | default "http"': None,
    '$modelServerType = .Values.inferencePool.modelServerType | default "vllm"': None,
    '$parserType := ""': None,
    'if and (eq (lower $modelServerType) "vllm") (eq (lower $modelServerProtocol) "grpc")': False,
    "else if and .Values.inferencePool .Values.inferencePool.parser": False,
    '$parserType = "vllmgrpc-parser"': None,
    "$parserType = .Values.inferencePool.parser": None,
    '.Values.inferenceExtension.metricsDataSource.scheme | default "http" | quote': '"http"',
    '.Values.inferenceExtension.metricsDataSource.path | default "/metrics" | quote': '"/metrics"',
    ".Values.inferenceExtension.metricsDataSource.insecureSkipVerify | default true": "true",
    '$modelServerType := .Values.inferencePool.modelServerType | default "vllm"': None,
    "if and .Values.inferenceExtension.endpointsServer (not .Values.inferenceExtension.endpointsServer"
    ".createInferencePool) ": False,
    'if ne $modelServerType "vllm"': False,
    "if $parserType": False,
    "if .Values.inferenceExtension.latencyPredictor.enabled": False,
    # routerlib (llm-d-router)
    '$modelServerProtocol := .Values.router.modelServers.protocol | default "http"': None,
    '$modelServerType := .Values.router.modelServers.type | default "vllm"': None,
    "$parsers := list": None,
    '$parsers = append $parsers "vllmgrpc-parser"': None,
    "else if .Values.router.epp.parsers": False,
    "$parsers = .Values.router.epp.parsers": None,
    'else if eq (lower $modelServerType) "triton"': False,
    '$parsers = append $parsers "passthrough-parser"': None,
    '.Values.router.epp.metricsDataSource.scheme | default "http" | quote': '"http"',
    '.Values.router.epp.metricsDataSource.path | default "/metrics" | quote': '"/metrics"',
    ".Values.router.epp.metricsDataSource.insecureSkipVerify | default true": "true",
    "range $p := $parsers": [],
    "if .Values.router.latencyPredictor.enabled": False,
    "if $parsers": False,
}
_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")


def render_template(block: str) -> str:
    """Render a config-map value of a Helm template under :data:`HELM_ACTIONS` (if/else/range/end only)."""
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch active, some branch of this if was taken)

    def active() -> bool:
        return all(a for a, _ in stack)

    for line in block.splitlines():
        stripped = line.strip()
        whole = _ACTION.fullmatch(stripped)
        if whole:
            action = whole.group(1)
            if action == "end":
                stack.pop()
            elif action == "else":
                _, taken = stack.pop()
                stack.append((not taken, True))
            elif action.startswith("else if "):
                _, taken = stack.pop()
                value = bool(_lookup(action)) and not taken
                stack.append((value, taken or value))
            elif action.startswith(("if ", "range ")):
                value = bool(_lookup(action))
                stack.append((value, value))
            else:
                _lookup(action)  # an assignment: must be known
            continue
        if active():
            out.append(_ACTION.sub(lambda m: str(_lookup(m.group(1))), line))
    if stack:
        raise ValueError("unbalanced template")
    return "\n".join(out) + "\n"


def _lookup(action: str) -> Any:
    for key in (action, action + " "):
        if key in HELM_ACTIONS:
            return HELM_ACTIONS[key]
    raise KeyError(f"Helm template action not in HELM_ACTIONS: {{{{ {action} }}}}")


def helm_documents(text: str) -> Iterator[tuple[str, str]]:
    # the config map's data keys are block scalars ("key: |") indented by two spaces
    for m in re.finditer(r"^  ([\w.-]+\.yaml): \|\n((?:^(?:    .*)?\n)+)", text, re.MULTILINE):
        if not KIND_RE.search(m.group(2)):
            continue
        rendered = render_template(textwrap.dedent(m.group(2)))
        for how, doc in yaml_documents(rendered):
            suffix = "" if how == "the file" else f", {how}"
            yield (
                f"Helm template, ConfigMap data key {m.group(1)}, rendered with the chart defaults{suffix}",
                doc,
            )


# --- collection --------------------------------------------------------------------------------------


def extract(path: str, text: str) -> Iterator[tuple[str, str]]:
    if "/templates/" in path:
        yield from helm_documents(text)
    elif path.endswith((".yaml", ".yml")):
        yield from yaml_documents(text)
    elif path.endswith(".md"):
        yield from markdown_documents(text)
    elif path.endswith(".go"):
        yield from go_documents(text)


def collect(mirror_root: Path) -> tuple[list[Extracted], list[str]]:
    """The documents, and a line for each file where fewer documents than ``kind:`` lines were found
    (Go format strings such as ``fmt.Sprintf(`...path: %q...`)``, a kubebuilder PROJECT file)."""
    found: list[Extracted] = []
    skipped: list[str] = []
    seen: dict[str, Extracted] = {}
    for source in SOURCES:
        mirror = mirror_root / source.mirror / "repo"
        commit = _git(mirror, "rev-parse", source.rev).strip()
        try:
            listing = _git(mirror, "grep", "-l", "-E", "kind: *EndpointPickerConfig", commit)
        except subprocess.CalledProcessError:  # git grep: 1 = no match
            listing = ""
        paths = sorted(line.split(":", 1)[1] for line in listing.splitlines())
        for path in paths:
            text = _git(mirror, "show", f"{commit}:{path}")
            documents = list(extract(path, text))
            kinds = len(KIND_RE.findall(text))
            if len(documents) < kinds:
                skipped.append(f"{source.short}:{path}: {kinds - len(documents)} of {kinds} not extracted")
            for how, doc in documents:
                item = Extracted(source, commit, path, how, doc)
                key = doc.strip()
                if key in seen:
                    seen[key].duplicates.append(f"{source.short}:{path} ({how})")
                    continue
                seen[key] = item
                found.append(item)
    _name(found)
    return found, skipped


def _flatten(path: str) -> str:
    stem = re.sub(r"\.(ya?ml|md|go)$", "", path)
    return re.sub(r"[^A-Za-z0-9_.-]", ".", stem)


def _name(items: list[Extracted]) -> None:
    by_file: dict[tuple[str, str], list[Extracted]] = {}
    for item in items:
        by_file.setdefault((item.source.short, item.path), []).append(item)
    for group in by_file.values():
        for n, item in enumerate(group, 1):
            suffix = f"__{n}" if len(group) > 1 else ""
            item.filename = f"{item.source.short}/{_flatten(item.path)}{suffix}.yaml"


def header(item: Extracted) -> str:
    lines = [
        f"# repository: {item.source.url}",
        f"# path: {item.path}",
        f"# commit: {item.commit} ({item.source.why})",
        f"# extracted: {item.how}",
    ]
    lines += [f"# also at: {d}" for d in item.duplicates]
    return "\n".join(lines) + "\n"


def write(items: list[Extracted], skipped: list[str], corpus: Path = CORPUS) -> None:
    from tests.compat.expectations import expect

    manifest: dict[str, dict[str, str]] = {}
    for item in items:  # every verdict first: a rule that fails leaves the corpus as it was
        verdict, why, match = expect(item.source.short, item.path, item.how, item.text)
        manifest[item.filename] = {"expect": verdict, "why": why}
        if match:
            manifest[item.filename]["match"] = match
    for source in SOURCES:
        directory = corpus / source.short
        if directory.exists():
            for old in directory.glob("*.yaml"):
                old.unlink()
    for item in items:
        target = corpus / item.filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(header(item) + item.text)
    (corpus / "skipped.txt").write_text(
        "# Generated by `python -m tests.compat.collect`: files with more `kind: EndpointPickerConfig`\n"
        "# lines than documents collected (Go format strings completed at run time, non-config files).\n"
        + "".join(f"{line}\n" for line in skipped)
    )
    with (corpus / "manifest.yaml").open("w") as out:
        out.write(
            "# Generated by `python -m tests.compat.collect`: whether upstream loads or rejects each corpus\n"
            "# file, and why (rules in tests/compat/expectations.py). Do not edit by hand.\n"
        )
        yaml.safe_dump(manifest, out, sort_keys=True, width=120)


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path("/work/.mirror")
    items, skipped = collect(root)
    write(items, skipped)
    counts: dict[str, int] = {}
    for item in items:
        counts[item.source.short] = counts.get(item.source.short, 0) + 1
    for short, n in counts.items():
        print(f"{short}: {n} documents")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
