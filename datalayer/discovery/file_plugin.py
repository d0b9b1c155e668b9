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

``multicluster-file-discovery`` (llm-d-router) is the same plugin for a cluster-scoped picker whose
endpoints are peer clusters, reached by their gateway host: an ``address`` may also be an IPv6 address
or a DNS-1123 subdomain (lower-case labels of letters, digits and ``-``, at most 253 characters; not
resolved: the destination is ``host:port``). An entry's ``metricsAddress`` label (with ``metricsPort``,
default the entry's port) moves its scrape target to that host and port, for a peer that serves its pool
metrics apart from its gateway (ignored by a data source that sets its own ``port``; ``metricsPort``
without ``metricsAddress`` is ignored). Ours: a ``metricsAddress`` that is no host, or a ``metricsPort``
outside 1-65535, is an entry error (upstream would accept it and fail every scrape).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
import yaml

from datalayer.discovery.base import DiscoverySink, SpecTracker, is_ip_literal, join_address, make_spec
from datalayer.discovery.file import EndpointsFileError, file_stamp
from datalayer.records import EndpointSpec

__all__ = [
    "MAX_FILE_BYTES",
    "MULTICLUSTER_TYPE",
    "FileDiscoveryPlugin",
    "check_endpoints_file",
    "parse_upstream_endpoints",
    "valid_host_or_ip",
]

MAX_FILE_BYTES = 1 << 20
MULTICLUSTER_TYPE = "multicluster-file-discovery"
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
log = structlog.get_logger("datalayer")


def _file_error(path: str, message: str) -> EndpointsFileError:
    return EndpointsFileError(path, "", message)


def valid_host_or_ip(address: str) -> bool:
    """An IPv4 / IPv6 literal or a DNS-1123 subdomain (``multicluster-file-discovery``'s addresses)."""
    if is_ip_literal(address):
        return True
    return len(address) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(address) is not None


def _valid_port(port: str) -> bool:
    return port.isascii() and port.isdigit() and 1 <= int(port) <= 65535


def _metrics_host(labels: Mapping[str, str], port: str) -> str:
    """``metricsAddress[:metricsPort]`` from the labels ("" without metricsAddress); ValueError naming a
    bad label."""
    address = labels.get("metricsAddress", "")
    if not address:
        return ""
    if not valid_host_or_ip(address):
        raise ValueError(f"invalid metricsAddress label {address!r}")
    metrics_port = labels.get("metricsPort") or port
    if not _valid_port(metrics_port):
        raise ValueError(f"invalid metricsPort label {metrics_port!r}")
    return join_address(address, int(metrics_port))


def parse_upstream_endpoints(
    text: str, path: str, *, multicluster: bool = False
) -> tuple[list[EndpointSpec], list[str]]:
    """(valid endpoints, entry errors); raises :class:`EndpointsFileError` for a file error.
    ``multicluster``: ``multicluster-file-discovery``'s addresses and metrics labels (module docstring)."""
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
        if multicluster:
            if not valid_host_or_ip(address):
                errors.append(f"endpoint {name!r}: invalid host {address!r}")
                continue
        elif not _is_ipv4(address):
            errors.append(f"endpoint {name!r}: invalid IPv4 address {address!r}")
            continue
        if not _valid_port(port):
            errors.append(f"endpoint {name!r}: invalid port {port!r}")
            continue
        where = join_address(address, int(port))
        if where in taken:
            errors.append(f"endpoint {name!r}: {where} is already another endpoint's address")
            continue
        labels = {str(k): v for k, v in (entry.get("labels") or {}).items()}
        metrics_host = ""
        if multicluster:
            try:
                metrics_host = _metrics_host(labels, port)
            except ValueError as exc:
                errors.append(f"endpoint {name!r}: {exc}")
                continue
        taken.add(where)
        specs.append(make_spec(where, name, labels, pod_name=name, metrics_host=metrics_host))
    return specs, errors


def _is_ipv4(address: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address)
    except ValueError:
        return False


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


def check_endpoints_file(path: str, *, multicluster: bool = False) -> list[EndpointSpec]:
    """The start-up load: any file or entry error raises :class:`EndpointsFileError`."""
    specs, errors = parse_upstream_endpoints(_read(path), path, multicluster=multicluster)
    if errors:
        raise _file_error(path, "; ".join(errors))
    return specs


class FileDiscoveryPlugin:
    """The discovery source of a ``file-discovery`` plugin, or with ``multicluster`` of a
    ``multicluster-file-discovery`` one (see the module docstring)."""

    def __init__(
        self,
        name: str,
        path: str,
        watch_file: bool = False,
        *,
        multicluster: bool = False,
        poll_interval: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.plugin_type = MULTICLUSTER_TYPE if multicluster else "file-discovery"
        self.multicluster = multicluster
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
            specs, errors = parse_upstream_endpoints(text, self.path, multicluster=self.multicluster)
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
