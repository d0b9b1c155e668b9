"""State of the fake Kubernetes API server: objects, resourceVersions, an event log, watchers.

Objects are plain JSON dicts keyed by (resource, namespace, name), where a *resource* is
``(group, version, plural)`` (group ``""`` for the core API). Every write bumps one global
resourceVersion (an increasing integer rendered as a string, as the real server does) and appends an
event to the log; watchers get the events after their resourceVersion. :meth:`compact` forgets the
log, so a watch or list from an older resourceVersion gets 410 Gone, like etcd compaction.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conflict", "Event", "FakeKubeStore", "NotFound", "Resource", "Watcher", "matches"]

Resource = tuple[str, str, str]  # (group, version, plural)
Obj = dict[str, Any]


class Conflict(Exception):
    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class NotFound(Exception):
    pass


@dataclass(frozen=True)
class Event:
    rv: int
    resource: Resource
    namespace: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    old: Obj | None = None


def _labels_match(labels: Mapping[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _fields_match(obj: Obj, selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.replace("==", "=").partition("=")
        node: Any = obj
        for part in key.strip().split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if str(node if node is not None else "") != value.strip():
            return False
    return True


def matches(obj: Obj | None, label_selector: str, field_selector: str) -> bool:
    if obj is None:
        return False
    labels = obj.get("metadata", {}).get("labels") or {}
    return _labels_match(labels, label_selector) and _fields_match(obj, field_selector)


@dataclass
class Watcher:
    resource: Resource
    namespace: str
    label_selector: str
    field_selector: str
    queue: asyncio.Queue[Event | str] = field(default_factory=asyncio.Queue)


class FakeKubeStore:
    def __init__(self) -> None:
        self.kinds: dict[Resource, str] = {}
        self.objects: dict[tuple[Resource, str, str], Obj] = {}
        self.log: list[Event] = []
        self.rv = 100
        self.compacted_rv = 0
        self.watchers: list[Watcher] = []
        self.requests: list[tuple[str, str]] = []  # (method, path?query) for assertions

    def register(self, group: str, version: str, plural: str, kind: str) -> Resource:
        resource = (group, version, plural)
        self.kinds[resource] = kind
        return resource

    def _api_version(self, resource: Resource) -> str:
        return f"{resource[0]}/{resource[1]}" if resource[0] else resource[1]

    def _emit(self, event: Event) -> None:
        self.log.append(event)
        for w in self.watchers:
            if w.resource == event.resource and w.namespace == event.namespace:
                w.queue.put_nowait(event)

    def _stamp(self, resource: Resource, namespace: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        self.rv += 1
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = namespace
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"uid-{meta.get('name')}-{self.rv}")
        obj.setdefault("apiVersion", self._api_version(resource))
        obj.setdefault("kind", self.kinds[resource])
        return obj

    # -- writes (also used directly by tests) ---------------------------------------------------

    def create(self, resource: Resource, namespace: str, obj: Obj) -> Obj:
        name = obj["metadata"]["name"]
        if (resource, namespace, name) in self.objects:
            raise Conflict("AlreadyExists", f'{resource[2]} "{name}" already exists')
        stored = self._stamp(resource, namespace, obj)
        self.objects[(resource, namespace, name)] = stored
        self._emit(Event(self.rv, resource, namespace, "ADDED", stored))
        return stored

    def replace(self, resource: Resource, namespace: str, obj: Obj, *, check_version: bool = True) -> Obj:
        name = obj["metadata"]["name"]
        old = self.objects.get((resource, namespace, name))
        if old is None:
            raise NotFound(f'{resource[2]} "{name}" not found')
        given = obj["metadata"].get("resourceVersion")
        if check_version and given and given != old["metadata"]["resourceVersion"]:
            raise Conflict(
                "Conflict",
                f'Operation cannot be fulfilled on {resource[2]} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        stored = self._stamp(resource, namespace, obj)
        self.objects[(resource, namespace, name)] = stored
        self._emit(Event(self.rv, resource, namespace, "MODIFIED", stored, old))
        return stored

    def apply(self, resource: Resource, namespace: str, obj: Obj) -> Obj:
        """Create or replace (no version check): the test's way to change the world."""
        if (resource, namespace, obj["metadata"]["name"]) in self.objects:
            return self.replace(resource, namespace, obj, check_version=False)
        return self.create(resource, namespace, obj)

    def delete(self, resource: Resource, namespace: str, name: str) -> Obj:
        old = self.objects.pop((resource, namespace, name), None)
        if old is None:
            raise NotFound(f'{resource[2]} "{name}" not found')
        self.rv += 1
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(Event(self.rv, resource, namespace, "DELETED", gone))
        return gone

    # -- reads ------------------------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> Obj:
        obj = self.objects.get((resource, namespace, name))
        if obj is None:
            raise NotFound(f'{resource[2]} "{name}" not found')
        return obj

    def list(
        self, resource: Resource, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> Obj:
        items = [
            o
            for (r, ns, _), o in sorted(self.objects.items(), key=lambda kv: kv[0][2])
            if r == resource and ns == namespace and matches(o, label_selector, field_selector)
        ]
        return {
            "apiVersion": self._api_version(resource),
            "kind": f"{self.kinds[resource]}List",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }

    def events_since(self, rv: int, watcher: Watcher) -> list[Event]:
        return [
            e
            for e in self.log
            if e.rv > rv and e.resource == watcher.resource and e.namespace == watcher.namespace
        ]

    # -- fault injection --------------------------------------------------------------------------

    def compact(self) -> None:
        """Forget the event log: resuming from an older resourceVersion now gets 410 Gone."""
        self.compacted_rv = self.rv
        self.log.clear()

    def drop_watches(self) -> None:
        """Close every open watch stream (the client sees a clean end of stream)."""
        for w in self.watchers:
            w.queue.put_nowait("drop")

    def expire_watches(self) -> None:
        """Send every open watch an ERROR 410 event, then close it (and compact)."""
        self.compact()
        for w in self.watchers:
            w.queue.put_nowait("gone")

    def bookmark(self) -> None:
        """Send every open watch a BOOKMARK carrying the current resourceVersion."""
        for w in self.watchers:
            w.queue.put_nowait(f"bookmark:{self.rv}")
