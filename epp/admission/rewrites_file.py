"""Read InferenceModelRewrite objects from YAML (standalone mode: ``--model-rewrites-file``; also the
Kubernetes watch, per object).

The file holds one or more YAML documents; each is an ``InferenceModelRewrite``
(``inference.networking.x-k8s.io/v1alpha2``, or llm-d-router's ``llm-d.ai/v1alpha2``) or a ``List`` /
``InferenceModelRewriteList`` with ``items``. It is read once at startup (as ``--objectives-file``).
Checked as the CRD's schema, plus what GIE's code assumes: ``metadata.name`` a non-empty string;
``metadata.creationTimestamp`` (optional; an RFC 3339 time: the precedence between objects, older
first, then by name); ``spec.poolRef`` (optional in a file) with a string ``name`` and optional
``group`` / ``kind``; ``spec.rules`` a list; each rule's ``matches`` (optional) a list of
``{model: {type: Exact, value: NAME}}`` (``type`` defaults to ``Exact``, the only type; ``value``
non-empty); ``targets`` a non-empty list of ``{modelRewrite: NAME, weight: 1..1000000}`` where either
every target sets ``weight`` or none does. In a file, unknown fields are errors and names must be
unique; the watch reads objects with ``strict=False`` (fields a newer CRD adds are ignored). Every error
is a :class:`RewritesFileError` naming the file, the location (``documents[0].spec.rules[1].targets[0]
.weight``) and what was expected. With ``pool_name`` set, objects whose ``spec.poolRef.name`` names
another pool are skipped.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import yaml

from epp.admission.objectives_file import ObjectivesFileError
from epp.admission.rewrites import MAX_WEIGHT, ModelRewrite, RewriteRule, RewriteTarget

__all__ = [
    "API_VERSIONS",
    "DEFAULT_POOL_GROUP",
    "RewritesFileError",
    "load_rewrites_file",
    "parse_rewrites",
    "rewrite_from_document",
]

API_VERSIONS = frozenset({"inference.networking.x-k8s.io/v1alpha2", "llm-d.ai/v1alpha2"})
DEFAULT_POOL_GROUP = "inference.networking.k8s.io"  # the CRD's default for spec.poolRef.group
_KIND = "InferenceModelRewrite"
_FIELDS = {
    "spec": frozenset({"poolRef", "rules"}),
    "poolRef": frozenset({"name", "group", "kind"}),
    "rule": frozenset({"matches", "targets"}),
    "match": frozenset({"model"}),
    "model": frozenset({"type", "value"}),
    "target": frozenset({"modelRewrite", "weight"}),
}


class RewritesFileError(ObjectivesFileError):
    """Invalid InferenceModelRewrite: ``source`` (file), ``location`` (path in the document), ``message``."""


def _mapping(value: Any, loc: str, part: str, strict: bool) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RewritesFileError("expected a mapping", loc)
    if strict:
        unknown = sorted(set(value) - _FIELDS[part], key=str)
        if unknown:
            expected = f"unknown field; expected one of {sorted(_FIELDS[part])}"
            raise RewritesFileError(expected, f"{loc}.{unknown[0]}")
    return value


def _list(value: Any, loc: str) -> list[Any]:
    if not isinstance(value, list):
        raise RewritesFileError("expected a list", loc)
    return value


def _name(value: Any, loc: str) -> str:
    if not isinstance(value, str) or not value:
        raise RewritesFileError(f"expected a non-empty string, got {value!r}", loc)
    return value


def _timestamp(value: Any, loc: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            value = None
    if not isinstance(value, datetime.datetime):
        raise RewritesFileError("expected an RFC 3339 time such as 2025-01-31T12:00:00Z", loc)
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return float(value.timestamp())


def _target(doc: Any, loc: str, strict: bool) -> RewriteTarget:
    doc = _mapping(doc, loc, "target", strict)
    model = _name(doc.get("modelRewrite"), f"{loc}.modelRewrite")
    weight = doc.get("weight")
    valid = isinstance(weight, int) and not isinstance(weight, bool) and 1 <= weight <= MAX_WEIGHT
    if weight is not None and not valid:
        raise RewritesFileError(f"expected an integer in [1, {MAX_WEIGHT}], got {weight!r}", f"{loc}.weight")
    return RewriteTarget(model, weight)


def _rule(doc: Any, loc: str, strict: bool) -> RewriteRule:
    doc = _mapping(doc, loc, "rule", strict)
    models: list[str] = []
    for i, match in enumerate(_list(doc.get("matches") or [], f"{loc}.matches")):
        where = f"{loc}.matches[{i}]"
        match = _mapping(match, where, "match", strict)
        model = _mapping(match.get("model"), f"{where}.model", "model", strict)
        kind = model.get("type", "Exact")
        if kind is not None and kind != "Exact":
            expected = f"expected 'Exact' (the only match type), got {kind!r}"
            raise RewritesFileError(expected, f"{where}.model.type")
        value = _name(model.get("value"), f"{where}.model.value")
        if value not in models:
            models.append(value)
    targets = _list(doc.get("targets"), f"{loc}.targets")
    if not targets:
        raise RewritesFileError("expected at least one target", f"{loc}.targets")
    parsed = tuple(_target(t, f"{loc}.targets[{i}]", strict) for i, t in enumerate(targets))
    weighted = [t.weight is not None for t in parsed]
    if any(weighted) and not all(weighted):
        missing = weighted.index(False)
        raise RewritesFileError(
            "expected a weight on every target or on none", f"{loc}.targets[{missing}].weight"
        )
    return RewriteRule(tuple(models), parsed)


def rewrite_from_document(doc: Any, loc: str, *, strict: bool = True) -> tuple[ModelRewrite, str]:
    """One object and its ``spec.poolRef.group`` (the CRD's default when unset); errors have no source."""
    if not isinstance(doc, dict):
        raise RewritesFileError("expected a mapping", loc)
    if doc.get("apiVersion") not in API_VERSIONS:
        raise RewritesFileError(
            f"expected one of {sorted(API_VERSIONS)}, got {doc.get('apiVersion')!r}", f"{loc}.apiVersion"
        )
    if doc.get("kind") != _KIND:
        raise RewritesFileError(f"expected {_KIND!r}, got {doc.get('kind')!r}", f"{loc}.kind")
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        raise RewritesFileError("expected a mapping with a name", f"{loc}.metadata")
    name = _name(meta.get("name"), f"{loc}.metadata.name")
    namespace = meta.get("namespace") or ""
    if not isinstance(namespace, str):
        raise RewritesFileError("expected a string", f"{loc}.metadata.namespace")
    created = _timestamp(meta.get("creationTimestamp"), f"{loc}.metadata.creationTimestamp")
    spec = _mapping(doc.get("spec"), f"{loc}.spec", "spec", strict)
    pool, group = "", DEFAULT_POOL_GROUP
    if spec.get("poolRef") is not None:
        ref = _mapping(spec["poolRef"], f"{loc}.spec.poolRef", "poolRef", strict)
        pool = _name(ref.get("name"), f"{loc}.spec.poolRef.name")
        group = ref.get("group", DEFAULT_POOL_GROUP)
        if not isinstance(group, str):
            raise RewritesFileError("expected a string", f"{loc}.spec.poolRef.group")
    rules = _list(spec.get("rules"), f"{loc}.spec.rules")
    parsed = tuple(_rule(r, f"{loc}.spec.rules[{i}]", strict) for i, r in enumerate(rules))
    return ModelRewrite(name, parsed, created, pool, namespace), group


def parse_rewrites(text: str, source: str = "", pool_name: str | None = None) -> list[ModelRewrite]:
    """Parse YAML ``text`` strictly (see the module docstring); ``source`` names it in errors."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise RewritesFileError(f"invalid YAML: {exc}", source=source) from None
    found: list[ModelRewrite] = []
    seen: set[str] = set()
    for i, doc in enumerate(documents):
        loc = f"documents[{i}]"
        if isinstance(doc, dict) and doc.get("kind") in ("List", f"{_KIND}List"):
            items = doc.get("items")
            if not isinstance(items, list):
                raise RewritesFileError("expected a list", f"{loc}.items", source)
            pairs = [(f"{loc}.items[{j}]", item) for j, item in enumerate(items)]
        else:
            pairs = [(loc, doc)]
        for where, item in pairs:
            try:
                rewrite, _ = rewrite_from_document(item, where)
            except RewritesFileError as exc:
                raise RewritesFileError(exc.message, exc.location, source) from None
            if rewrite.name in seen:
                raise RewritesFileError(f"duplicate name {rewrite.name!r}", f"{where}.metadata.name", source)
            seen.add(rewrite.name)
            if pool_name is None or not rewrite.pool or rewrite.pool == pool_name:
                found.append(rewrite)
    return found


def load_rewrites_file(path: str | Path, pool_name: str | None = None) -> list[ModelRewrite]:
    """Read and parse the file at ``path`` (OSError -> RewritesFileError)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise RewritesFileError(f"cannot read: {exc.strerror}", source=str(path)) from None
    return parse_rewrites(text, str(path), pool_name)
