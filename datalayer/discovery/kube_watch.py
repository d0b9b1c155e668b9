"""A reflector: list + watch of one Kubernetes collection with resourceVersion resumption.

``Reflector(name, list_call)`` keeps ``objects`` (object name -> raw JSON dict) equal to the server's
collection. ``list_call`` is a kubernetes-asyncio list method with its arguments bound (e.g.
``partial(core.list_namespaced_pod, "ns", label_selector="app=x")``). The loop:

1. list (raw JSON); replace ``objects``; remember ``metadata.resourceVersion``; call ``on_change``;
2. watch from that resourceVersion (``allow_watch_bookmarks``, server-side ``timeoutSeconds``);
   ADDED / MODIFIED / DELETED update ``objects`` and call ``on_change``; BOOKMARK only advances the
   resourceVersion; a stream that ends (timeout or dropped connection) is re-opened from the last
   resourceVersion, without relisting;
3. 410 Gone (an ERROR event or status) means the resourceVersion was compacted: relist (step 1);
4. any other failure: log once per distinct error, back off (0.2 s doubling to 5 s) and relist.

``on_change`` is called synchronously on the loop after every applied change; the owner recomputes
its endpoint set from the reflectors' ``objects`` there.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

__all__ = ["GoneError", "Reflector"]

log = structlog.get_logger("datalayer")


class GoneError(Exception):
    """The watched resourceVersion is too old (HTTP 410): relist."""


class Reflector:
    def __init__(
        self,
        name: str,
        list_call: Callable[..., Awaitable[Any]],
        on_change: Callable[[], None],
        *,
        watch_timeout: int = 300,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.name = name
        self._list_call = list_call
        self._on_change = on_change
        self._watch_timeout = watch_timeout
        self._sleep = sleep
        self.objects: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.synced = False
        self.lists = 0  # how many times the collection was listed (relists after 410 included)
        self._last_error: str | None = None

    async def run(self) -> None:
        backoff = 0.2
        while True:
            try:
                await self._list()
                backoff = 0.2
                while True:
                    await self._watch()
            except GoneError:
                log.info("watch expired (410 Gone); relisting", resource=self.name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}"
                if text != self._last_error:
                    log.error("kubernetes list/watch failed; retrying", resource=self.name, error=text)
                    self._last_error = text
                await self._sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _list(self) -> None:
        resp = await self._list_call(_preload_content=False)
        try:
            body = await resp.read()
            status = resp.status
        finally:
            resp.release()
        if status == 410:
            raise GoneError()
        if not 200 <= status < 300:
            raise ApiException(status=status, reason=body[:200].decode("utf-8", "replace"))
        doc = json.loads(body)
        self.objects = {o["metadata"]["name"]: o for o in doc.get("items") or []}
        self.resource_version = str(doc.get("metadata", {}).get("resourceVersion", ""))
        self.lists += 1
        self.synced = True
        self._last_error = None
        self._on_change()

    async def _watch(self) -> None:
        watch = Watch(return_type="object")
        stream = watch.stream(
            self._list_call,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout,
        )
        try:
            async for event in stream:
                self._apply(event)
        except ApiException as exc:
            if exc.status == 410:
                raise GoneError() from None
            raise
        finally:
            await watch.close()

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("raw_object") or {}
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if kind == "BOOKMARK":
            self.resource_version = str(version or self.resource_version)
            return
        name = meta.get("name")
        if not isinstance(name, str):
            return
        if kind in ("ADDED", "MODIFIED"):
            self.objects[name] = obj
        elif kind == "DELETED":
            self.objects.pop(name, None)
        else:
            return
        if version:
            self.resource_version = str(version)
        self._on_change()
