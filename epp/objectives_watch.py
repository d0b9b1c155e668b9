"""Kubernetes mode: watch InferenceObjective objects and keep the objective store current.

An :class:`ObjectiveWatch` first picks the API group as llm-d-router does (:func:`epp.crd_group.
served_group`: ``llm-d.ai/v1alpha2``, else the deprecated ``inference.networking.x-k8s.io/v1alpha2``);
when neither serves ``inferenceobjectives`` (the CRD is not installed) it logs that once and returns.
Otherwise it runs a list + watch (the data layer's :class:`~datalayer.discovery.
kube_watch.Reflector`: resourceVersion resumption, relist on 410 Gone, backoff on errors) over
``inferenceobjectives`` in that group and the pool's namespace. After every
change it rebuilds the set of objectives whose ``spec.poolRef.name`` is this pool and swaps it into the
:class:`~epp.admission.objectives.InMemoryObjectiveStore` at once, so a request sees either the old or
the new set, never a mix.

Objects are read as the API server sends them: a missing ``apiVersion``/``kind`` is filled in and
``spec`` fields this version does not know are ignored (a newer CRD must not make objectives vanish).
An object that is invalid even so (e.g. a non-integer priority) is skipped with one error log per
distinct problem; the others still apply.
"""

from __future__ import annotations

from typing import Any

import structlog

from datalayer.discovery.kube_watch import Reflector
from epp.admission.objectives import InferenceObjective, InMemoryObjectiveStore
from epp.admission.objectives_file import ObjectivesFileError
from epp.admission.objectives_file import _objective as objective_from_document
from epp.crd_group import LEGACY_GROUP, served_group

__all__ = ["OBJECTIVE_GROUP", "OBJECTIVE_PLURAL", "OBJECTIVE_VERSION", "ObjectiveWatch"]

log = structlog.get_logger("epp.objectives")

OBJECTIVE_GROUP = LEGACY_GROUP  # GIE's group; llm-d-router's is epp.crd_group.LLMD_GROUP
OBJECTIVE_VERSION = "v1alpha2"
OBJECTIVE_PLURAL = "inferenceobjectives"


class ObjectiveWatch:
    def __init__(
        self, api_client: Any, namespace: str, pool_name: str, store: InMemoryObjectiveStore
    ) -> None:
        from kubernetes_asyncio import client

        api = client.CustomObjectsApi(api_client)
        self._api_client = api_client
        self.namespace = namespace
        self.group: str | None = None  # chosen by run()
        self.pool_name = pool_name
        self.store = store
        self.reflector = Reflector(
            f"{OBJECTIVE_PLURAL}/{namespace}",
            lambda **kw: api.list_namespaced_custom_object(
                self.group, OBJECTIVE_VERSION, namespace, OBJECTIVE_PLURAL, **kw
            ),
            self._changed,
        )
        self._reported: set[str] = set()

    @property
    def synced(self) -> bool:
        return self.reflector.synced

    async def run(self) -> None:
        """List and watch until cancelled; return at once when no group serves the CRD."""
        self.group = await served_group(
            self._api_client, self.namespace, OBJECTIVE_PLURAL, "InferenceObjective"
        )
        if self.group is None:
            log.info("InferenceObjective CRD not installed; objectives are not watched")
            return
        await self.reflector.run()

    def _changed(self) -> None:
        objectives: list[InferenceObjective] = []
        for name, obj in sorted(self.reflector.objects.items()):
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            doc = {
                "apiVersion": obj.get("apiVersion") or f"{self.group}/{OBJECTIVE_VERSION}",
                "kind": obj.get("kind") or "InferenceObjective",
                "metadata": obj.get("metadata"),
                "spec": {k: v for k, v in (spec or {}).items() if k in ("priority", "poolRef")},
            }
            try:
                objective = objective_from_document(doc, f"{OBJECTIVE_PLURAL}/{name}")
            except ObjectivesFileError as exc:
                if str(exc) not in self._reported:
                    self._reported.add(str(exc))
                    log.error("ignoring invalid InferenceObjective", error=str(exc))
                continue
            if objective.pool == self.pool_name:
                objectives.append(objective)
        self.store.replace_all(objectives)
