"""Load InferenceObjective objects from a YAML file (standalone mode, ``--objectives-file``).

The file holds one or more YAML documents; each is an ``InferenceObjective`` (see
:mod:`epp.admission.objectives`) or a ``List`` / ``InferenceObjectiveList`` with ``items``. Strict:
wrong ``apiVersion``/``kind``, a missing ``metadata.name``, a non-integer ``spec.priority``, unknown
``spec`` fields or duplicate names raise :class:`ObjectivesFileError` naming the file, the location
(``documents[1].spec.priority``) and what was expected. With ``pool_name`` set, objectives whose
``spec.poolRef.name`` names another pool are skipped (as the Kubernetes controller does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from epp.admission.objectives import InferenceObjective

__all__ = ["API_VERSIONS", "ObjectivesFileError", "load_objectives_file", "parse_objectives"]

API_VERSIONS = frozenset(
    {"inference.networking.x-k8s.io/v1alpha2", "inference.networking.k8s.io/v1alpha2", "llm-d.ai/v1alpha2"}
)
_SPEC_FIELDS = frozenset({"priority", "poolRef"})


class ObjectivesFileError(ValueError):
    """Invalid objectives file: ``source`` (file), ``location`` (path in the document), ``message``."""

    def __init__(self, message: str, location: str = "", source: str = "") -> None:
        self.message = message
        self.location = location
        self.source = source
        where = ": ".join(p for p in (source, location) if p)
        super().__init__(f"{where}: {message}" if where else message)


def _objective(doc: Any, loc: str) -> InferenceObjective:
    if not isinstance(doc, dict):
        raise ObjectivesFileError("expected a mapping", loc)
    if doc.get("apiVersion") not in API_VERSIONS:
        raise ObjectivesFileError(
            f"expected one of {sorted(API_VERSIONS)}, got {doc.get('apiVersion')!r}", f"{loc}.apiVersion"
        )
    if doc.get("kind") != "InferenceObjective":
        raise ObjectivesFileError(f"expected 'InferenceObjective', got {doc.get('kind')!r}", f"{loc}.kind")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ObjectivesFileError("expected a non-empty string", f"{loc}.metadata.name")
    namespace = meta.get("namespace", "")
    if not isinstance(namespace, str):
        raise ObjectivesFileError("expected a string", f"{loc}.metadata.namespace")
    spec = doc.get("spec") or {}
    if not isinstance(spec, dict):
        raise ObjectivesFileError("expected a mapping", f"{loc}.spec")
    unknown = sorted(set(spec) - _SPEC_FIELDS)
    if unknown:
        raise ObjectivesFileError(
            f"unknown field; expected one of {sorted(_SPEC_FIELDS)}", f"{loc}.spec.{unknown[0]}"
        )
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ObjectivesFileError(f"expected an integer, got {priority!r}", f"{loc}.spec.priority")
    pool_ref = spec.get("poolRef") or {}
    if not isinstance(pool_ref, dict) or not isinstance(pool_ref.get("name", ""), str):
        raise ObjectivesFileError("expected a mapping with a string 'name'", f"{loc}.spec.poolRef")
    return InferenceObjective(meta["name"], priority, pool_ref.get("name", ""), namespace)


def parse_objectives(text: str, source: str = "", pool_name: str | None = None) -> list[InferenceObjective]:
    """Parse YAML ``text`` (see module docstring); ``source`` names it in errors."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ObjectivesFileError(f"invalid YAML: {exc}", source=source) from None
    found: list[InferenceObjective] = []
    seen: set[str] = set()
    for i, doc in enumerate(documents):
        loc = f"documents[{i}]"
        if isinstance(doc, dict) and doc.get("kind") in ("List", "InferenceObjectiveList"):
            items = doc.get("items")
            if not isinstance(items, list):
                raise ObjectivesFileError("expected a list", f"{loc}.items", source)
            pairs = [(f"{loc}.items[{j}]", item) for j, item in enumerate(items)]
        else:
            pairs = [(loc, doc)]
        for where, item in pairs:
            try:
                objective = _objective(item, where)
            except ObjectivesFileError as exc:
                raise ObjectivesFileError(exc.message, exc.location, source) from None
            if objective.name in seen:
                raise ObjectivesFileError(
                    f"duplicate objective {objective.name!r}", f"{where}.metadata.name", source
                )
            seen.add(objective.name)
            if pool_name is None or not objective.pool or objective.pool == pool_name:
                found.append(objective)
    return found


def load_objectives_file(path: str | Path, pool_name: str | None = None) -> list[InferenceObjective]:
    """Read and parse the objectives file at ``path`` (OSError -> ObjectivesFileError)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ObjectivesFileError(f"cannot read: {exc.strerror}", source=str(path)) from None
    return parse_objectives(text, str(path), pool_name)
