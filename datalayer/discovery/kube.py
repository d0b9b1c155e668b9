"""Kubernetes discovery: an InferencePool and the pods it selects, or a plain pod selector.

* :class:`KubePoolDiscovery` (``--pool-name``): watches the ``InferencePool``
  (``inference.networking.k8s.io/v1``, ``spec.selector.matchLabels``, ``spec.targetPorts``) and the pods
  of its namespace matching its selector; a selector change restarts the pod watch. A deleted pool
  (or one with an invalid spec) yields no endpoints / keeps the last good ones respectively.
  ``--pool-group inference.networking.x-k8s.io`` watches the older ``v1alpha2`` pools (``spec.selector``
  map, ``spec.targetPortNumber``).
* :class:`KubeSelectorDiscovery` (``--endpoint-selector`` + ``--endpoint-target-ports``): pods only.

A pod is an endpoint while it has a pod IP, its ``Ready`` condition is ``True`` and it has no
``deletionTimestamp``. It yields one endpoint per target port ``i`` (``<pod>-rank-<i>``, address
``<podIP>:<port>``, the pod's labels); the annotation ``inference.networking.k8s.io/active-ports``
(``"8000,8001"``) keeps only the listed ports (ranks keep their index). The engine comes from the pod
label ``inference.networking.k8s.io/engine-type``. Both sources are synced once every watch they need
has completed its first list. The Kubernetes client is an injected kubernetes-asyncio ``ApiClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import structlog
from kubernetes_asyncio import client as k8s

from datalayer.discovery.base import DiscoverySink, SpecTracker, make_spec
from datalayer.discovery.kube_watch import Reflector
from datalayer.records import EndpointSpec

__all__ = [
    "ACTIVE_PORTS_ANNOTATION",
    "KubePoolDiscovery",
    "KubeSelectorDiscovery",
    "parse_selector",
    "pod_endpoints",
]

log = structlog.get_logger("datalayer")

ACTIVE_PORTS_ANNOTATION = "inference.networking.k8s.io/active-ports"
_GROUP_VERSIONS = {"inference.networking.k8s.io": "v1", "inference.networking.x-k8s.io": "v1alpha2"}


def parse_selector(text: str) -> dict[str, str]:
    """``"k=v,k2=v2"`` -> mapping; raises ValueError naming the bad term."""
    out: dict[str, str] = {}
    for term in (t.strip() for t in text.split(",")):
        key, eq, value = term.partition("=")
        if not term or not eq or not key.strip() or "!" in key:
            raise ValueError(f"expected key=value terms separated by commas, got {term!r} in {text!r}")
        out[key.strip()] = value.strip().lstrip("=")
    return out


def _selector_string(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _active_ports(annotations: Mapping[str, str]) -> set[int] | None:
    raw = annotations.get(ACTIVE_PORTS_ANNOTATION)
    if raw is None:
        return None
    return {int(p) for p in (t.strip() for t in raw.split(",")) if p.isdigit()}


def pod_endpoints(pod: Mapping[str, Any], ports: Sequence[int]) -> list[EndpointSpec]:
    """The endpoints of one pod (none unless it has an IP, is Ready and is not terminating)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if not ip or meta.get("deletionTimestamp") or not _ready(pod):
        return []
    labels = meta.get("labels") or {}
    active = _active_ports(meta.get("annotations") or {})
    host = f"[{ip}]" if ":" in ip else ip
    return [
        make_spec(
            f"{host}:{port}",
            f"{meta['name']}-rank-{rank}",
            labels,
            pod_name=meta["name"],
            node_address=status.get("hostIP") or "",
        )
        for rank, port in enumerate(ports)
        if active is None or port in active
    ]


def _pool_labels(spec: Mapping[str, Any]) -> dict[str, str]:
    selector = spec.get("selector")
    labels = (
        selector.get("matchLabels") if isinstance(selector, dict) and "matchLabels" in selector else selector
    )
    where = (
        "spec.selector.matchLabels"
        if isinstance(selector, dict) and "matchLabels" in selector
        else "spec.selector"
    )
    if not isinstance(labels, dict) or not labels or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError(f"{where}: expected a non-empty mapping of strings")
    return labels


def _pool_ports(spec: Mapping[str, Any]) -> tuple[int, ...]:
    if "targetPorts" not in spec and "targetPortNumber" in spec:  # v1alpha2
        number = spec["targetPortNumber"]
        if not isinstance(number, int) or not 0 < number < 65536:
            raise ValueError(f"spec.targetPortNumber: expected a port number, got {number!r}")
        return (number,)
    raw_ports = spec.get("targetPorts")
    if not isinstance(raw_ports, list) or not 1 <= len(raw_ports) <= 8:
        raise ValueError("spec.targetPorts: expected 1 to 8 ports")
    ports = []
    for i, entry in enumerate(raw_ports):
        number = entry.get("number") if isinstance(entry, dict) else None
        if not isinstance(number, int) or not 0 < number < 65536:
            raise ValueError(f"spec.targetPorts[{i}].number: expected a port number, got {number!r}")
        ports.append(number)
    return tuple(ports)


def _pool_target(pool: Mapping[str, Any]) -> tuple[dict[str, str], tuple[int, ...]]:
    """(selector labels, target ports) of an InferencePool; ValueError naming the field when invalid.

    ``v1``: ``spec.selector.matchLabels`` and ``spec.targetPorts[].number``; the older ``v1alpha2``
    (group ``inference.networking.x-k8s.io``): ``spec.selector`` (a plain map) and ``spec.targetPortNumber``.
    """
    spec = pool.get("spec") or {}
    return _pool_labels(spec), _pool_ports(spec)


class _PodsWatch:
    """A pod reflector for one label selector, running as a task."""

    def __init__(self, api: Any, namespace: str, selector: str, on_change: Any) -> None:
        call = partial(k8s.CoreV1Api(api).list_namespaced_pod, namespace, label_selector=selector)
        self.selector = selector
        self.reflector = Reflector(f"pods[{selector}]", call, on_change)
        self.task = asyncio.create_task(self.reflector.run(), name=f"datalayer-pods-{selector}")

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def _specs(pods: Iterable[Mapping[str, Any]], ports: Sequence[int]) -> list[EndpointSpec]:
    return [spec for pod in pods for spec in pod_endpoints(pod, ports)]


class KubeSelectorDiscovery:
    def __init__(
        self,
        api_client: Any,
        namespace: str,
        selector: Mapping[str, str] | str,
        ports: Sequence[int],
    ) -> None:
        """``selector``: labels to match, or a label selector string passed to the API server as is
        (set-based terms such as ``env in (a,b)``, ``!key``; validated by the caller)."""
        if not selector:
            raise ValueError("--endpoint-selector: expected at least one key=value")
        if not ports:
            raise ValueError("--endpoint-target-ports: expected at least one port")
        self.api_client = api_client
        self.namespace = namespace
        self.selector = selector if isinstance(selector, str) else _selector_string(selector)
        self.ports = tuple(ports)

    async def run(self, sink: DiscoverySink) -> None:
        tracker = SpecTracker(sink.current())

        def changed() -> None:
            events = tracker.update(_specs(watch.reflector.objects.values(), self.ports))
            if events:
                sink.apply(events)
            if watch.reflector.synced:
                sink.mark_synced()

        watch = _PodsWatch(self.api_client, self.namespace, self.selector, changed)
        try:
            await watch.task
        finally:
            await watch.close()


class KubePoolDiscovery:
    def __init__(
        self,
        api_client: Any,
        namespace: str,
        pool_name: str,
        *,
        group: str = "inference.networking.k8s.io",
        version: str | None = None,
    ) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.pool_name = pool_name
        self.group = group
        self.version = version or _GROUP_VERSIONS.get(group, "v1")
        self._pods: _PodsWatch | None = None
        self._ports: tuple[int, ...] = ()
        self._problem: str | None = None

    async def run(self, sink: DiscoverySink) -> None:
        tracker = SpecTracker(sink.current())
        custom = k8s.CustomObjectsApi(self.api_client)
        call = partial(
            custom.list_namespaced_custom_object,
            self.group,
            self.version,
            self.namespace,
            "inferencepools",
            field_selector=f"metadata.name={self.pool_name}",
        )
        retired: list[_PodsWatch] = []

        def changed() -> None:
            retired[:] = [w for w in retired if not w.task.done()]
            pool = pools.objects.get(self.pool_name)
            if pool is None:
                if self._pods is not None:
                    self._pods.task.cancel()
                    retired.append(self._pods)
                    self._pods = None
                if pools.synced:
                    self._report(f"InferencePool {self.namespace}/{self.pool_name} not found: no endpoints")
                self._apply(tracker, sink, [], pools.synced)
                return
            try:
                labels, ports = _pool_target(pool)
            except ValueError as exc:
                self._report(
                    f"InferencePool {self.namespace}/{self.pool_name}: {exc}; keeping the last endpoints"
                )
                return
            self._problem = None
            selector = _selector_string(labels)
            self._ports = ports
            if self._pods is None or self._pods.selector != selector:
                if self._pods is not None:
                    self._pods.task.cancel()
                    retired.append(self._pods)
                self._pods = _PodsWatch(self.api_client, self.namespace, selector, changed)
            pods = self._pods.reflector
            self._apply(
                tracker, sink, _specs(pods.objects.values(), ports) if pods.synced else None, pods.synced
            )

        pools = Reflector(f"inferencepools/{self.pool_name}", call, changed)
        pool_task = asyncio.create_task(pools.run(), name="datalayer-inferencepool")
        try:
            await pool_task
        finally:
            pool_task.cancel()
            for w in [*retired, *([self._pods] if self._pods is not None else [])]:
                await w.close()
            self._pods = None
            with contextlib.suppress(asyncio.CancelledError):
                await pool_task

    def _report(self, problem: str) -> None:
        if problem != self._problem:
            self._problem = problem
            log.error("inference pool problem", problem=problem)

    @staticmethod
    def _apply(
        tracker: SpecTracker, sink: DiscoverySink, specs: list[EndpointSpec] | None, synced: bool
    ) -> None:
        if specs is not None:
            events = tracker.update(specs)
            if events:
                sink.apply(events)
        if synced:
            sink.mark_synced()
