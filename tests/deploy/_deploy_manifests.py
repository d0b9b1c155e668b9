"""Validation of rendered Kubernetes objects, shared by the chart and example tests.

``validate_object(obj)`` raises ``AssertionError`` naming the object and the problem:

* built-in kinds (core, apps, rbac, coordination, ...): ``kubernetes-validate`` in strict mode (unknown
  fields are errors) against every Kubernetes version in ``KUBERNETES_VERSIONS``;
* InferencePool / InferenceObjective: the JSON schemas in ``inference_schemas.json`` (written from the
  API definitions);
* Gateway API, Prometheus Operator, Istio and GKE (networking.gke.io, Managed Prometheus) kinds: their
  required fields (``REQUIRED``), since their CRD schemas are not available offline.

Any other kind is an error, so a new kind in a chart needs a deliberate entry here.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

__all__ = ["KUBERNETES_VERSIONS", "by_kind", "one", "validate_object"]

# grpc probes are GA from 1.27; 1.37 is the newest schema kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
SCHEMAS = Path(__file__).with_name("inference_schemas.json")
CRD_KINDS = {
    ("inference.networking.k8s.io/v1", "InferencePool"),
    ("inference.networking.x-k8s.io/v1alpha2", "InferenceObjective"),
}

# (apiVersion, kind) -> required dotted paths
REQUIRED: dict[tuple[str, str], tuple[str, ...]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("metadata.name", "spec.selector", "spec.endpoints"),
    ("networking.istio.io/v1", "DestinationRule"): ("metadata.name", "spec.host"),
    ("gateway.networking.k8s.io/v1", "Gateway"): ("metadata.name", "spec.gatewayClassName", "spec.listeners"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): ("metadata.name", "spec.parentRefs", "spec.rules"),
    ("networking.gke.io/v1", "HealthCheckPolicy"): ("metadata.name", "spec.targetRef", "spec.default"),
    ("networking.gke.io/v1", "GCPBackendPolicy"): ("metadata.name", "spec.targetRef", "spec.default"),
    ("monitoring.googleapis.com/v1", "PodMonitoring"): ("metadata.name", "spec.selector", "spec.endpoints"),
}


@cache
def _schemas() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMAS.read_text())
    return loaded


def _name(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def _lookup(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def validate_object(obj: dict[str, Any]) -> None:
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if key in CRD_KINDS:
        schemas = _schemas()
        schema = {"$defs": schemas["$defs"], **schemas[key[1]]}
        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(obj), key=str)
        assert not errors, f"{_name(obj)}: " + "; ".join(
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
        )
        return
    if key in REQUIRED:
        missing = [path for path in REQUIRED[key] if _lookup(obj, path) in (None, "", [], {})]
        assert not missing, f"{_name(obj)}: missing required fields {missing}"
        return
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError as exc:
            raise AssertionError(f"{_name(obj)}: no schema for {key} in Kubernetes {version}") from exc
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(map(str, exc.absolute_path))
            raise AssertionError(f"{_name(obj)} (Kubernetes {version}) at {where}: {exc.message}") from exc


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]
