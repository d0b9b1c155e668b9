"""Builders of the Kubernetes objects tests need: Pods, InferencePools, Leases (plain JSON dicts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CORE_PODS", "INFERENCE_POOLS", "LEASES", "inference_pool", "lease", "pod"]

CORE_PODS = ("", "v1", "pods", "Pod")
INFERENCE_POOLS = ("inference.networking.k8s.io", "v1", "inferencepools", "InferencePool")
LEASES = ("coordination.k8s.io", "v1", "leases", "Lease")


def pod(
    name: str,
    ip: str | None,
    labels: Mapping[str, str],
    *,
    ready: bool = True,
    terminating: bool = False,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels), "annotations": dict(annotations or {})}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    return {"metadata": meta, "spec": {"containers": [{"name": "vllm", "image": "vllm"}]}, "status": status}


def inference_pool(name: str, match_labels: Mapping[str, str], ports: Sequence[int]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": dict(match_labels)},
            "targetPorts": [{"number": p} for p in ports],
            "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}},
        },
    }


def lease(name: str, holder: str | None = None, duration: int = 15) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder:
        spec["holderIdentity"] = holder
    return {"metadata": {"name": name}, "spec": spec}
