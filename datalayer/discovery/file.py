"""File discovery (``--endpoints-file``): a YAML or JSON file listing endpoints, re-read on change.

Format (JSON is accepted too, being YAML)::

    endpoints:
      - 10.0.0.1:8000                     # shorthand: address only
      - address: 10.0.0.2:8000
        name: gpu-node-2                  # optional, defaults to the address
        labels:                           # optional string -> string
          inference.networking.k8s.io/engine-type: sglang

A top-level list is accepted as the ``endpoints`` list. Addresses may name hosts (``vllm-a:8000``):
wrap this source in :class:`~datalayer.discovery.resolving.ResolvingDiscovery` to resolve them.
The file is checked every ``poll_interval`` seconds (stat + content); a changed, valid file is applied
as one batch (adds, removals, relabels).
A missing or invalid file keeps the last good set and logs one error per distinct problem; before the
first good read the source is not synced. :func:`load_endpoints_file` raises
:class:`EndpointsFileError` naming the file and the field, for startup checks.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import yaml

from datalayer.discovery.base import DiscoverySink, SpecTracker, make_spec, split_address
from datalayer.records import EndpointSpec

__all__ = ["EndpointsFileError", "FileDiscovery", "load_endpoints_file", "parse_endpoints_document"]

log = structlog.get_logger("datalayer")


class EndpointsFileError(ValueError):
    def __init__(self, path: str, location: str, message: str) -> None:
        self.path = path
        self.location = location
        super().__init__(f"{path}: {location}: {message}" if location else f"{path}: {message}")


def _entry(path: str, where: str, item: Any) -> EndpointSpec:
    if isinstance(item, str):
        item = {"address": item}
    if not isinstance(item, dict):
        raise EndpointsFileError(path, where, f"expected an address string or a mapping, got {item!r}")
    unknown = sorted(set(item) - {"address", "name", "labels"})
    if unknown:
        raise EndpointsFileError(path, f"{where}.{unknown[0]}", "unknown key (expected address/name/labels)")
    address = item.get("address")
    if not isinstance(address, str):
        raise EndpointsFileError(path, f"{where}.address", "expected a host:port string")
    try:
        split_address(address)
    except ValueError as exc:
        raise EndpointsFileError(path, f"{where}.address", str(exc)) from None
    name = item.get("name", "")
    if not isinstance(name, str):
        raise EndpointsFileError(path, f"{where}.name", f"expected a string, got {name!r}")
    labels = item.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(x, str) for kv in labels.items() for x in kv):
        raise EndpointsFileError(path, f"{where}.labels", "expected a mapping of strings to strings")
    return make_spec(address.strip(), name, labels)


def parse_endpoints_document(text: str, path: str = "<endpoints>") -> list[EndpointSpec]:
    """Parse the file content; raise :class:`EndpointsFileError` naming ``path`` and the field."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise EndpointsFileError(path, "", f"not valid YAML/JSON ({exc})") from None
    if isinstance(doc, dict):
        unknown = sorted(set(doc) - {"endpoints"})
        if unknown:
            raise EndpointsFileError(path, unknown[0], "unknown key (expected endpoints)")
        doc = doc.get("endpoints")
    if not isinstance(doc, list):
        raise EndpointsFileError(path, "endpoints", "expected a list of endpoints")
    specs = [_entry(path, f"endpoints[{i}]", item) for i, item in enumerate(doc)]
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        if spec.address in seen:
            raise EndpointsFileError(path, f"endpoints[{i}].address", f"duplicate address {spec.address}")
        seen.add(spec.address)
    return specs


def load_endpoints_file(path: str) -> list[EndpointSpec]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise EndpointsFileError(path, "", f"cannot read ({exc})") from None
    return parse_endpoints_document(text, path)


def file_stamp(path: str) -> tuple[int, int, int] | None:
    """(mtime ns, size, inode) of ``path``, None when it cannot be read: a change means re-read it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class FileDiscovery:
    def __init__(
        self,
        path: str,
        *,
        poll_interval: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.path = path
        self.poll_interval = poll_interval
        self._sleep = sleep
        self._stamp: tuple[int, int, int] | None = None
        self._last_problem: str | None = None

    def _stat(self) -> tuple[int, int, int] | None:
        return file_stamp(self.path)

    def check(self, tracker: SpecTracker, sink: DiscoverySink) -> None:
        """Re-read the file if it changed; apply a valid new set; log a new problem once."""
        stamp = self._stat()
        if stamp is not None and stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            specs = load_endpoints_file(self.path)
        except EndpointsFileError as exc:
            if str(exc) != self._last_problem:
                self._last_problem = str(exc)
                log.error("endpoints file invalid; keeping the last good endpoints", error=str(exc))
            return
        self._last_problem = None
        events = tracker.update(specs)
        if events:
            sink.apply(events)
        sink.mark_synced()

    async def run(self, sink: DiscoverySink) -> None:
        tracker = SpecTracker(sink.current())
        while True:
            self.check(tracker, sink)
            await self._sleep(self.poll_interval)
