"""Kubernetes mode: watch InferenceModelRewrite objects and keep the rewrite store current.

A :class:`RewriteWatch` first picks the API group as llm-d-router does (:func:`epp.crd_group.
served_group`: ``llm-d.ai/v1alpha2``, else the deprecated ``inference.networking.x-k8s.io/v1alpha2``):
when neither serves ``inferencemodelrewrites`` (the CRD is not installed) it logs that once and returns,
as upstream starts its reconciler only when discovery finds the kind. Otherwise it runs a list + watch
(the data layer's :class:`~datalayer.discovery.kube_watch.Reflector`: resourceVersion resumption,
relist on 410 Gone, backoff on errors) in that group and, after every change,
rebuilds the set of objects whose ``spec.poolRef`` names this pool (``name`` and ``group``, as GIE's
reconciler) and swaps it into the :class:`~epp.admission.rewrites.RewriteStore` at once.

Objects are read with ``strict=False``: fields a newer CRD adds are ignored. An object that is invalid
even so (no targets, a weight out of range, weights on some targets only) is skipped with one error log
per distinct problem; the others still apply.
"""

from __future__ import annotations

from typing import Any

import structlog

from datalayer.discovery.kube_watch import Reflector
from epp.admission.rewrites import ModelRewrite, RewriteStore
from epp.admission.rewrites_file import RewritesFileError, rewrite_from_document
from epp.crd_group import LEGACY_GROUP, served_group

__all__ = ["REWRITE_GROUP", "REWRITE_PLURAL", "REWRITE_VERSION", "RewriteWatch"]

log = structlog.get_logger("epp.rewrites")

REWRITE_GROUP = LEGACY_GROUP  # GIE's group; llm-d-router's is epp.crd_group.LLMD_GROUP
REWRITE_VERSION = "v1alpha2"
REWRITE_PLURAL = "inferencemodelrewrites"
REPORTED_BUDGET = 256  # distinct invalid-object messages remembered to log each once (then forgotten)


class RewriteWatch:
    def __init__(
        self,
        api_client: Any,
        namespace: str,
        pool_name: str,
        store: RewriteStore,
        pool_group: str = "inference.networking.k8s.io",
    ) -> None:
        from kubernetes_asyncio import client

        api = client.CustomObjectsApi(api_client)
        self._api_client = api_client
        self.namespace = namespace
        self.group: str | None = None  # chosen by run()
        self.pool_name = pool_name
        self.pool_group = pool_group
        self.store = store
        self.reflector = Reflector(
            f"{REWRITE_PLURAL}/{namespace}",
            lambda **kw: api.list_namespaced_custom_object(
                self.group, REWRITE_VERSION, namespace, REWRITE_PLURAL, **kw
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
            self._api_client, self.namespace, REWRITE_PLURAL, "InferenceModelRewrite"
        )
        if self.group is None:
            log.info("InferenceModelRewrite CRD not installed; model rewrites are not watched")
            return
        await self.reflector.run()

    def _changed(self) -> None:
        rewrites: list[ModelRewrite] = []
        for name, obj in sorted(self.reflector.objects.items()):
            doc = {
                **obj,
                "apiVersion": obj.get("apiVersion") or f"{self.group}/{REWRITE_VERSION}",
                "kind": obj.get("kind") or "InferenceModelRewrite",
            }
            try:
                rewrite, group = rewrite_from_document(doc, f"{REWRITE_PLURAL}/{name}", strict=False)
            except RewritesFileError as exc:
                if str(exc) not in self._reported:
                    if len(self._reported) >= REPORTED_BUDGET:
                        self._reported.clear()
                    self._reported.add(str(exc))
                    log.error("ignoring invalid InferenceModelRewrite", error=str(exc))
                continue
            if rewrite.pool == self.pool_name and group == self.pool_group:
                rewrites.append(rewrite)
        self.store.replace_all(rewrites)
        log.info("InferenceModelRewrites updated", count=len(rewrites))
