"""InferencePool mode: watch the pool's InferenceObjective and InferenceModelRewrite objects.

:class:`PoolScopedWatch` is the one watch both kinds use. It first picks the API group as llm-d-router
does (:func:`epp.kubernetes.crd_group.served_group`: ``llm-d.ai/v1alpha2``, else the deprecated
``inference.networking.x-k8s.io/v1alpha2``); when neither serves the resource (the CRD is not installed)
it logs that once and returns, as upstream starts no reconciler for a kind that discovery does not find.
Otherwise it runs a list + watch (the data layer's :class:`~datalayer.discovery.kube_watch.Reflector`:
resourceVersion resumption, relist on 410 Gone, backoff on errors) over the resource in that group and
the pool's namespace. After every change it reads every object, keeps those whose ``spec.poolRef``
names this pool, and hands the whole set to the store at once, so a request sees either the old or the
new set, never a mix.

Objects are read as the API server sends them: a missing ``apiVersion``/``kind`` is filled in and
``spec`` fields this version does not know are ignored (a newer CRD must not make objects vanish). An
object that is invalid even so is skipped with one error log per distinct problem (at most
:data:`REPORTED_BUDGET` distinct messages are remembered; then the memory starts over); the others
still apply.

* :class:`ObjectiveWatch`: InferenceObjective (``priority``, ``poolRef``), matched on the pool's name,
  swapped into the :class:`~epp.admission.objectives.InMemoryObjectiveStore`;
* :class:`RewriteWatch`: InferenceModelRewrite (no targets, a weight out of range, weights on some
  targets only: invalid), matched on the pool's name and group (as GIE's reconciler), swapped into the
  :class:`~epp.admission.rewrites.RewriteStore`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

import structlog

from datalayer.discovery.kube_watch import Reflector
from epp.admission.objectives import InferenceObjective, InMemoryObjectiveStore
from epp.admission.objectives_file import ObjectivesFileError
from epp.admission.objectives_file import _objective as objective_from_document
from epp.admission.rewrites import ModelRewrite, RewriteStore
from epp.admission.rewrites_file import RewritesFileError, rewrite_from_document
from epp.kubernetes.crd_group import LEGACY_GROUP, VERSION, served_group

__all__ = [
    "OBJECTIVE_GROUP",
    "OBJECTIVE_PLURAL",
    "OBJECTIVE_VERSION",
    "REPORTED_BUDGET",
    "REWRITE_GROUP",
    "REWRITE_PLURAL",
    "REWRITE_VERSION",
    "ObjectiveWatch",
    "PoolScopedWatch",
    "RewriteWatch",
]

OBJECTIVE_GROUP = LEGACY_GROUP  # GIE's group; llm-d-router's is epp.kubernetes.crd_group.LLMD_GROUP
OBJECTIVE_VERSION = VERSION
OBJECTIVE_PLURAL = "inferenceobjectives"
REWRITE_GROUP = LEGACY_GROUP
REWRITE_VERSION = VERSION
REWRITE_PLURAL = "inferencemodelrewrites"
REPORTED_BUDGET = 256  # distinct invalid-object messages remembered to log each once (then forgotten)

T = TypeVar("T")


class PoolScopedWatch(ABC, Generic[T]):
    """List + watch one namespaced custom resource and publish the pool's objects (see the module).

    A subclass names the resource (:attr:`kind`, :attr:`plural`, :attr:`what` for the not-installed
    log line, :attr:`invalid`: the error its reader raises) and implements :meth:`read` (one object to a
    value, or None when it belongs to another pool) and :meth:`publish` (the whole set, after every
    change). ``group`` is None until :meth:`run` has chosen it.
    """

    kind: ClassVar[str]
    plural: ClassVar[str]
    what: ClassVar[str]
    invalid: ClassVar[type[Exception]]
    log: ClassVar[Any]

    def __init__(self, api_client: Any, namespace: str, pool_name: str) -> None:
        from kubernetes_asyncio import client

        api = client.CustomObjectsApi(api_client)
        self._api_client = api_client
        self.namespace = namespace
        self.group: str | None = None  # chosen by run()
        self.pool_name = pool_name
        self.reflector = Reflector(
            f"{self.plural}/{namespace}",
            lambda **kw: api.list_namespaced_custom_object(self.group, VERSION, namespace, self.plural, **kw),
            self._changed,
        )
        self._reported: set[str] = set()

    @property
    def synced(self) -> bool:
        return self.reflector.synced

    async def run(self) -> None:
        """List and watch until cancelled; return at once when no group serves the CRD."""
        self.group = await served_group(self._api_client, self.namespace, self.plural, self.kind)
        if self.group is None:
            self.log.info(f"{self.kind} CRD not installed; {self.what} are not watched")
            return
        await self.reflector.run()

    def document(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """``obj`` with ``apiVersion`` and ``kind`` filled in when the API server left them out."""
        return {
            **obj,
            "apiVersion": obj.get("apiVersion") or f"{self.group}/{VERSION}",
            "kind": obj.get("kind") or self.kind,
        }

    @abstractmethod
    def read(self, obj: Mapping[str, Any], source: str) -> T | None:
        """The value of one object (``source`` names it in errors), None when it is another pool's;
        raises :attr:`invalid`."""

    @abstractmethod
    def publish(self, items: list[T]) -> None:
        """Swap the pool's whole set into the store."""

    def _changed(self) -> None:
        items: list[T] = []
        for name, obj in sorted(self.reflector.objects.items()):
            try:
                item = self.read(obj, f"{self.plural}/{name}")
            except self.invalid as exc:
                if str(exc) not in self._reported:
                    if len(self._reported) >= REPORTED_BUDGET:
                        self._reported.clear()
                    self._reported.add(str(exc))
                    self.log.error(f"ignoring invalid {self.kind}", error=str(exc))
                continue
            if item is not None:
                items.append(item)
        self.publish(items)


class ObjectiveWatch(PoolScopedWatch[InferenceObjective]):
    """InferenceObjective objects of ``pool_name`` into ``store`` (``priority`` and ``poolRef`` read)."""

    kind = "InferenceObjective"
    plural = OBJECTIVE_PLURAL
    what = "objectives"
    invalid = ObjectivesFileError
    log = structlog.get_logger("epp.objectives")

    def __init__(
        self, api_client: Any, namespace: str, pool_name: str, store: InMemoryObjectiveStore
    ) -> None:
        super().__init__(api_client, namespace, pool_name)
        self.store = store

    def read(self, obj: Mapping[str, Any], source: str) -> InferenceObjective | None:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        known = {k: v for k, v in (spec or {}).items() if k in ("priority", "poolRef")}
        doc = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": obj.get("metadata")}
        objective = objective_from_document(self.document({**doc, "spec": known}), source)
        return objective if objective.pool == self.pool_name else None

    def publish(self, items: list[InferenceObjective]) -> None:
        self.store.replace_all(items)


class RewriteWatch(PoolScopedWatch[ModelRewrite]):
    """InferenceModelRewrite objects whose ``poolRef`` names ``pool_name`` in ``pool_group`` into
    ``store`` (read with ``strict=False``: fields a newer CRD adds are ignored)."""

    kind = "InferenceModelRewrite"
    plural = REWRITE_PLURAL
    what = "model rewrites"
    invalid = RewritesFileError
    log = structlog.get_logger("epp.rewrites")

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        pool_name: str,
        store: RewriteStore,
        pool_group: str = "inference.networking.k8s.io",
    ) -> None:
        super().__init__(api_client, namespace, pool_name)
        self.pool_group = pool_group
        self.store = store

    def read(self, obj: Mapping[str, Any], source: str) -> ModelRewrite | None:
        rewrite, group = rewrite_from_document(self.document(obj), source, strict=False)
        return rewrite if rewrite.pool == self.pool_name and group == self.pool_group else None

    def publish(self, items: list[ModelRewrite]) -> None:
        self.store.replace_all(items)
        self.log.info("InferenceModelRewrites updated", count=len(items))
