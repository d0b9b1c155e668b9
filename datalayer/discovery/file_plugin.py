"""``file-discovery`` (llm-d-router): endpoints from a YAML/JSON file named by ``dataLayer.discovery``.

The plugin form of file discovery, with upstream's file schema (not ``--endpoints-file``'s)::

    endpoints:
      - name: vllm-0              # required; with namespace the endpoint's identity
        namespace: default        # optional, default "default"
        address: 10.0.0.1         # an IPv4 address
        port: "8000"              # a string holding 1-65535 (a YAML number is a file error, as upstream)
        labels: {k: v}            # optional

Parameters: ``path`` (required), ``watchFile`` (default false: read once at start; true: re-read when
the file changes, checked every second by stat and content, which also follows atomic renames and
ConfigMap symlink swaps). Semantics of upstream's ``load``: a file that cannot be read, is over 1 MiB or
does not parse is a *file error*; an entry with a bad address or port is an *entry error*, the entry is
skipped and the others applied. At start any error is fatal (:func:`check_endpoints_file` raises
:class:`EndpointsFileError`); on a reload a file error keeps the last endpoints and entry errors are
logged. Endpoints missing from a reloaded file are removed. Two entries with the same namespace/name:
the later one wins (upstream keys endpoints by it); two identities at one ``address:port`` cannot be
two endpoints here (pyepp keys endpoints by address), so the later one is an entry error. Unknown keys
in an entry are ignored (Go's JSON decoding).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
import yaml

from datalayer.discovery.base import DiscoverySink, SpecTracker, make_spec
from datalayer.discovery.file import EndpointsFileError, file_stamp
from datalayer.records import EndpointSpec

__all__ = ["MAX_FILE_BYTES", "FileDiscoveryPlugin", "check_endpoints_file", "parse_upstream_endpoints"]

MAX_FILE_BYTES = 1 << 20
log = structlog.get_logger("datalayer")


def _file_error(path: str, message: str) -> EndpointsFileError:
    return EndpointsFileError(path, "", message)


def parse_upstream_endpoints(text: str, path: str) -> tuple[list[EndpointSpec], list[str]]:
    """(valid endpoints, entry errors); raises :class:`EndpointsFileError` for a file error."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _file_error(path, f"parsing: {exc}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise _file_error(path, "unmarshalling: expected a mapping with an endpoints list")
    entries = doc.get("endpoints") or []
    if not isinstance(entries, list):
        raise _file_error(path, "unmarshalling: endpoints: expected a list")
    by_id: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _file_error(path, f"unmarshalling: endpoints[{i}]: expected a mapping")
        for key in ("name", "namespace", "address", "port"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise _file_error(path, f"unmarshalling: endpoints[{i}].{key}: expected a string")
        labels = entry.get("labels") or {}
        if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
            raise _file_error(path, f"unmarshalling: endpoints[{i}].labels: expected a mapping of strings")
        ident = (entry.get("namespace") or "default", entry.get("name") or "")
        by_id.pop(ident, None)  # a later entry replaces an earlier one (and takes its place in order)
        by_id[ident] = (i, entry)
    specs: list[EndpointSpec] = []
    errors: list[str] = []
    taken: set[str] = set()
    for _, entry in sorted(by_id.values(), key=lambda item: item[0]):
        name, address, port = entry.get("name") or "", entry.get("address") or "", entry.get("port") or ""
        try:
            if not isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address):
                raise ValueError
        except ValueError:
            errors.append(f"endpoint {name!r}: invalid IPv4 address {address!r}")
            continue
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            errors.append(f"endpoint {name!r}: invalid port {port!r}")
            continue
        where = f"{address}:{int(port)}"
        if where in taken:
            errors.append(f"endpoint {name!r}: {where} is already another endpoint's address")
            continue
        taken.add(where)
        labels = {str(k): v for k, v in (entry.get("labels") or {}).items()}
        specs.append(make_spec(where, name, labels, pod_name=name))
    return specs, errors


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _file_error(path, f"reading: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise _file_error(path, "endpoints file exceeds 1 MiB limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _file_error(path, f"parsing: not UTF-8 (byte {exc.start})") from None


def check_endpoints_file(path: str) -> list[EndpointSpec]:
    """The start-up load: any file or entry error raises :class:`EndpointsFileError`."""
    specs, errors = parse_upstream_endpoints(_read(path), path)
    if errors:
        raise _file_error(path, "; ".join(errors))
    return specs


class FileDiscoveryPlugin:
    """The discovery source of a ``file-discovery`` plugin (see the module docstring)."""

    plugin_type = "file-discovery"

    def __init__(
        self,
        name: str,
        path: str,
        watch_file: bool = False,
        *,
        poll_interval: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.name = name
        self.path = path
        self.watch_file = watch_file
        self.poll_interval = poll_interval
        self._sleep = sleep
        self._stamp: tuple[int, int, int] | None = None
        self._content: str | None = None

    def _stat(self) -> tuple[int, int, int] | None:
        return file_stamp(self.path)

    def load(self, tracker: SpecTracker, sink: DiscoverySink) -> None:
        """Read the file and apply it; a file error keeps the last endpoints (logged)."""
        self._stamp = self._stat()
        try:
            text = _read(self.path)
            if text == self._content:
                return
            specs, errors = parse_upstream_endpoints(text, self.path)
        except EndpointsFileError as exc:
            log.error("failed to reload endpoints file; keeping the last endpoints", error=str(exc))
            return
        self._content = text
        for error in errors:
            log.error("endpoints file entry skipped", path=self.path, error=error)
        events = tracker.update(specs)
        if events:
            sink.apply(events)
        sink.mark_synced()

    async def run(self, sink: DiscoverySink) -> None:
        tracker = SpecTracker(sink.current())
        self.load(tracker, sink)
        if not self.watch_file:
            await asyncio.Event().wait()
        log.info("watching endpoints file for changes", plugin=self.plugin_type, path=self.path)
        while True:
            await self._sleep(self.poll_interval)
            if self._stat() != self._stamp:
                self.load(tracker, sink)
