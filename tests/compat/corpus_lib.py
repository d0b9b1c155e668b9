"""Shared by the corpus test, the gap listing and the compatibility report: the corpus files, their
upstream verdicts, and loading one exactly as the server does."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

import epp.config.sections
from epp.config.sections import LoadedConfig, load_picker_config
from scheduler.errors import ConfigError
from scheduler.registry import Registry
from tests.compat.expectations import LOADER_FIXTURES, uses_go_test_fakes, uses_harness_fakes
from tests.compat.go_fakes import go_test_fakes, register_go_test_fakes

__all__ = [
    "CORPUS",
    "Entry",
    "entries",
    "error_text",
    "gap_cause",
    "go_fixture",
    "load",
    "rejected_for_upstreams_reason",
    "try_load",
]

CORPUS = Path(__file__).parent / "corpus"


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # <repo>/<file>.yaml, relative to CORPUS
    expect: str  # "load" | "reject"
    why: str
    repositories: tuple[str, ...]  # the repository it is stored under, then those of its other locations
    match: str = ""  # for "reject": the pattern pyepp's error ("<location>: <message>") must match
    go_test_fakes: bool = False  # a Go test fixture naming the fake types its test registers

    @property
    def path(self) -> Path:
        return CORPUS / self.name


_ALSO_AT = re.compile(r"^# also at: ([\w.-]+):", re.MULTILINE)


@cache
def entries() -> tuple[Entry, ...]:
    manifest = yaml.safe_load((CORPUS / "manifest.yaml").read_text())
    out = []
    for name, item in sorted(manifest.items()):
        text = (CORPUS / name).read_text()
        repos = [name.split("/", 1)[0]]
        repos += [r for r in _ALSO_AT.findall(text) if r not in repos]
        loader_fixture = f"# path: {LOADER_FIXTURES}\n" in text
        fakes = (loader_fixture and uses_go_test_fakes(text)) or uses_harness_fakes(text)
        out.append(Entry(name, item["expect"], item["why"], tuple(repos), item.get("match", ""), fakes))
    return tuple(out)


_PICKER_REGISTRY = epp.config.sections.picker_registry


@contextmanager
def _go_test_fakes() -> Iterator[None]:
    """While active, the server's registry also holds the Go loader tests' fake plugin types."""

    def registry() -> Registry:
        return register_go_test_fakes(_PICKER_REGISTRY())

    epp.config.sections.picker_registry = registry  # type: ignore[assignment]
    try:
        with go_test_fakes():
            yield
    finally:
        epp.config.sections.picker_registry = _PICKER_REGISTRY  # type: ignore[assignment]


def load(entry: Entry) -> LoadedConfig:
    """Load the file as the server does (with the Go test's fakes registered for a loader fixture that
    names them, as the Go test does). Raises ConfigError."""
    if entry.go_test_fakes:
        with _go_test_fakes():
            return load_picker_config(str(entry.path), None)
    return load_picker_config(str(entry.path), None)


def try_load(entry: Entry) -> ConfigError | None:
    """:func:`load`'s ConfigError, or None when the file loads."""
    try:
        load(entry)
    except ConfigError as exc:
        return exc
    return None


def go_fixture(repository: str, constant: str) -> Entry:
    """The corpus entry of the Go loader fixture ``constant`` as found in ``repository``."""
    for entry in entries():
        if repository in entry.repositories and f"raw string literal {constant} at" in entry.path.read_text():
            return entry
    raise LookupError(f"no fixture {constant} of {repository} in the corpus")


_CAUSES: tuple[tuple[str, str], ...] = (
    (r"^requestHandler: unknown field", "requestHandler.parsers section"),
    (r"unknown feature gate '([^']+)'", r"featureGates: \1"),
    (r"flow control \(request queueing", "flow control (flowControl section / gate)"),
    (r"has type '([^']+)'; expected one of", r"data-layer source type \1"),
    (r'unknown plugin type "([^"]+)"', r"plugin type \1"),
    (r"^parser\.pluginRef: expected one of", "parser section naming a parser plugin"),
    (r"\(metrics-data-source [^)]*\): plugin could not be created", "metrics-data-source parameters"),
    (r"parameters\.insecureSkipVerify: unknown parameter", "models-data-source insecureSkipVerify"),
    (r"^dataLayer\.sources: expected a non-empty list", "empty dataLayer.sources"),
    (r"the encode stage \(E/P/D\)", "E/P/D encode stage"),
    (r"^dataLayer\.(\w+): unknown parameter", r"dataLayer.\1"),
    (r"^dataLayer\.discovery\.pluginRef: plugin '[^']*' \(([\w-]+)\)", r"dataLayer.discovery plugin type \1"),
    (
        r"failed to find dependency",
        "a plugin parameter naming a plugin declared later (upstream orders by dependency)",
    ),
)


def error_text(error: ConfigError) -> str:
    """``<location>: <message>`` (without the file name), what the manifest's ``match`` patterns see."""
    return f"{error.location}: {error.message}" if error.location else error.message


def rejected_for_upstreams_reason(entry: Entry, error: ConfigError | None) -> bool:
    return error is not None and re.search(entry.match, error_text(error)) is not None


def gap_cause(error: ConfigError | None) -> str:
    """A short cause for a load failure, used to group KNOWN_GAPS."""
    if error is None:
        return "loads"
    text = error_text(error)
    for pattern, cause in _CAUSES:
        m = re.search(pattern, text)
        if m:
            return m.expand(cause)
    return text[:100]
