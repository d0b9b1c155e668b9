"""A fake Kubernetes API server over HTTP on 127.0.0.1 speaking the real list/watch JSON.

Routes (namespaced resources only)::

    /api/v1/namespaces/{ns}/{plural}[/{name}]                  core group
    /apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}]  other groups

* ``GET`` collection: a ``<Kind>List`` with ``metadata.resourceVersion``; ``labelSelector`` (``=``,
  ``==``, ``!=``, existence) and ``fieldSelector`` (``metadata.name=...``) are honoured.
* ``GET`` collection with ``watch=true``: a chunked stream of ``{"type", "object"}`` lines. Without
  ``resourceVersion`` it first sends ADDED for every matching object; with one it replays the events
  after it, or sends ``ERROR`` with a 410 Status when that version was compacted. Objects that stop
  (start) matching a selector produce DELETED (ADDED), as the real watch cache does. BOOKMARK events on
  :meth:`FakeKubeStore.bookmark`; ``timeoutSeconds`` ends the stream.
* ``GET``/``PUT``/``DELETE`` one object, ``POST`` to a collection: 404 NotFound, 409 AlreadyExists,
  409 Conflict (stale ``metadata.resourceVersion`` on PUT) as ``Status`` objects.

Failure injection for clients that must bound their calls: :meth:`FakeKubeServer.stall` makes every
request wait (unanswered, connection open) until :meth:`FakeKubeServer.resume` or :meth:`stop`;
``latency`` (seconds) delays every answer. ``answered`` lists ``(time.monotonic(), method, path,
status)`` for each request the server finished handling (in order).

Use :func:`running_fake_kube` (async context manager) to get a started server and a kubernetes-asyncio
``ApiClient`` pointing at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from fakekube.store import Conflict, Event, FakeKubeStore, NotFound, Resource, Watcher, matches

__all__ = ["FakeKubeServer", "running_fake_kube"]


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _error(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(_status(code, reason, message), status=code)


class FakeKubeServer:
    def __init__(self, store: FakeKubeStore | None = None) -> None:
        self.store = store or FakeKubeStore()
        self._runner: web.AppRunner | None = None
        self._streams: set[web.StreamResponse] = set()
        self._resume = asyncio.Event()
        self._resume.set()
        self.latency = 0.0
        self.answered: list[tuple[float, str, str, int]] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stall(self) -> None:
        """From now on, requests wait unanswered until :meth:`resume` (or :meth:`stop`)."""
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    @web.middleware
    async def _inject(self, request: web.Request, handler: Any) -> web.StreamResponse:
        await self._resume.wait()
        if self.latency:
            await asyncio.sleep(self.latency)
        resp: web.StreamResponse = await handler(request)
        self.answered.append((time.monotonic(), request.method, request.path, resp.status))
        return resp

    async def start(self) -> None:
        app = web.Application(middlewares=[self._inject])
        app.router.add_route("*", "/api/{version}/namespaces/{ns}/{plural}", self._collection)
        app.router.add_route("*", "/api/{version}/namespaces/{ns}/{plural}/{name}", self._item)
        app.router.add_route("*", "/apis/{group}/{version}/namespaces/{ns}/{plural}", self._collection)
        app.router.add_route("*", "/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}", self._item)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self._resume.set()
        self.store.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    def _resource(self, request: web.Request) -> Resource | None:
        info = request.match_info
        resource = (info.get("group", ""), info["version"], info["plural"])
        return resource if resource in self.store.kinds else None

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        self.store.requests.append((request.method, request.path_qs))
        resource = self._resource(request)
        if resource is None:
            return _error(404, "NotFound", "the server could not find the requested resource")
        ns = request.match_info["ns"]
        q = request.query
        if request.method == "POST":
            body = await request.json()
            try:
                return web.json_response(self.store.create(resource, ns, body), status=201)
            except Conflict as exc:
                return _error(409, exc.reason, str(exc))
        if request.method != "GET":
            return _error(405, "MethodNotAllowed", request.method)
        labels, fields = q.get("labelSelector", ""), q.get("fieldSelector", "")
        if q.get("watch") in ("true", "1", "True"):
            return await self._watch(request, resource, ns, labels, fields)
        rv = q.get("resourceVersion", "")
        if rv and rv != "0" and int(rv) < self.store.compacted_rv:
            return _error(410, "Expired", f"too old resource version: {rv} ({self.store.compacted_rv})")
        return web.json_response(self.store.list(resource, ns, labels, fields))

    async def _item(self, request: web.Request) -> web.StreamResponse:
        self.store.requests.append((request.method, request.path_qs))
        resource = self._resource(request)
        if resource is None:
            return _error(404, "NotFound", "the server could not find the requested resource")
        ns, name = request.match_info["ns"], request.match_info["name"]
        try:
            if request.method == "GET":
                return web.json_response(self.store.get(resource, ns, name))
            if request.method == "PUT":
                body = await request.json()
                if body.get("metadata", {}).get("name") != name:
                    return _error(400, "BadRequest", "the name of the object does not match the URL")
                return web.json_response(self.store.replace(resource, ns, body))
            if request.method == "DELETE":
                return web.json_response(self.store.delete(resource, ns, name))
        except NotFound as exc:
            return _error(404, "NotFound", str(exc))
        except Conflict as exc:
            return _error(409, exc.reason, str(exc))
        return _error(405, "MethodNotAllowed", request.method)

    async def _watch(
        self, request: web.Request, resource: Resource, ns: str, labels: str, fields: str
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        watcher = Watcher(resource, ns, labels, fields)
        rv_text = request.query.get("resourceVersion", "")
        timeout = float(request.query.get("timeoutSeconds", "0") or 0) or None

        async def send(kind: str, obj: dict[str, Any]) -> None:
            await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        self.store.watchers.append(watcher)
        self._streams.add(resp)
        try:
            if rv_text and rv_text != "0":
                rv = int(rv_text)
                if rv < self.store.compacted_rv:
                    await send("ERROR", _status(410, "Expired", f"too old resource version: {rv}"))
                    return resp
                backlog = self.store.events_since(rv, watcher)
            else:
                listing = self.store.list(resource, ns, labels, fields)["items"]
                backlog = [
                    Event(int(o["metadata"]["resourceVersion"]), resource, ns, "ADDED", o) for o in listing
                ]
                rv = self.store.rv
            for event in backlog:
                await self._send_event(send, event, labels, fields, synthetic=not rv_text or rv_text == "0")
            async with asyncio.timeout(timeout):
                while True:
                    item = await watcher.queue.get()
                    if item == "drop":
                        break
                    if item == "gone":
                        await send("ERROR", _status(410, "Expired", "too old resource version"))
                        break
                    if isinstance(item, str) and item.startswith("bookmark:"):
                        await send(
                            "BOOKMARK",
                            {
                                "kind": self.store.kinds[resource],
                                "apiVersion": self.store._api_version(resource),
                                "metadata": {"resourceVersion": item.split(":", 1)[1]},
                            },
                        )
                        continue
                    assert isinstance(item, Event)
                    await self._send_event(send, item, labels, fields)
        except (TimeoutError, ConnectionResetError):
            pass
        finally:
            self.store.watchers.remove(watcher)
            self._streams.discard(resp)
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp

    async def _send_event(
        self, send: Any, event: Event, labels: str, fields: str, synthetic: bool = False
    ) -> None:
        now = matches(event.obj, labels, fields)
        before = matches(event.old, labels, fields) if event.old is not None else None
        kind = event.type
        if kind == "MODIFIED" and before is not None and not synthetic:
            if now and not before:
                kind = "ADDED"
            elif before and not now:
                kind = "DELETED"
            elif not now:
                return
        elif not now:
            return
        await send(kind, event.obj)


@contextlib.asynccontextmanager
async def running_fake_kube(store: FakeKubeStore | None = None) -> AsyncIterator[tuple[FakeKubeServer, Any]]:
    """A started server and a kubernetes-asyncio ``ApiClient`` configured for it (both closed after)."""
    from kubernetes_asyncio import client

    server = FakeKubeServer(store)
    await server.start()
    config = client.Configuration(host=server.url)
    api = client.ApiClient(configuration=config)
    try:
        yield server, api
    finally:
        await api.close()
        await server.stop()
