"""Choose the data layer's discovery source from the command line (exactly one mode, see epp.config.options).

* ``--endpoints a:1,b:2``: :class:`datalayer.StaticDiscovery`;
* ``--endpoints-file PATH``: :class:`datalayer.discovery.FileDiscovery` (YAML/JSON, watched for changes);
* ``--pool-name``: Kubernetes InferencePool discovery in ``--pool-namespace`` / ``--pool-group``;
* ``--endpoint-selector`` + ``--endpoint-target-ports``: Kubernetes pod-selector discovery;
* none of them: the configuration's ``dataLayer.discovery`` plugin (:func:`build_config_discovery`,
  llm-d-router's ``file-discovery``), exclusive with the flags.

In the two standalone modes a host may be a name: the source is wrapped in
:class:`datalayer.discovery.ResolvingDiscovery`, which resolves names every
``--endpoints-resolve-interval`` through the system resolver (``--endpoints-hosts-file`` first, when
given). At start every name must resolve, else :class:`DiscoveryError` names the flag (and file entry)
and the name; later failures keep the last good addresses (see :mod:`datalayer.discovery.names`).

The Kubernetes modes need an API client (in-cluster service account, else ``$KUBECONFIG`` /
``~/.kube/config``), created on the running loop; :func:`build_discovery` returns it with the source so
the caller closes it at shutdown. Raises :class:`DiscoveryError` naming the flag when the source cannot be
built (an invalid file or address, no Kubernetes configuration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datalayer import Discovery, StaticDiscovery
from datalayer.config import PluginSpec
from datalayer.discovery import (
    EndpointsFileError,
    FileDiscovery,
    HostsFileError,
    HostsFileResolver,
    NameResolution,
    ResolutionError,
    Resolver,
    ResolvingDiscovery,
    SystemResolver,
    load_endpoints_file,
)
from datalayer.discovery.file_plugin import MULTICLUSTER_TYPE, FileDiscoveryPlugin, check_endpoints_file
from datalayer.records import EndpointSpec
from epp.config.options import NO_ENDPOINTS, Options
from epp.kubernetes.client import kubernetes_client
from epp.kubernetes.label_selector import parse_label_selector

__all__ = [
    "BuiltDiscovery",
    "DiscoveryError",
    "build_config_discovery",
    "build_discovery",
]


class DiscoveryError(Exception):
    """Discovery cannot be set up; the message names the flag."""


@dataclass(frozen=True, slots=True)
class BuiltDiscovery:
    discovery: Discovery
    api_client: Any = None  # a kubernetes_asyncio ApiClient to close at shutdown, or None


def _check_endpoints_file(path: str) -> list[EndpointSpec]:
    """Fail at startup on a file that does not load (the watcher keeps the last good set later)."""
    try:
        return load_endpoints_file(path)
    except EndpointsFileError as exc:
        raise DiscoveryError(f"--endpoints-file: {exc}") from None


def _resolver(options: Options, resolver: Resolver | None) -> Resolver:
    base = resolver or SystemResolver()
    if options.endpoints_hosts_file is None:
        return base
    try:
        return HostsFileResolver(options.endpoints_hosts_file, base)
    except HostsFileError as exc:
        raise DiscoveryError(f"--endpoints-hosts-file: {exc}") from None


async def _standalone(
    options: Options, inner: Discovery, specs: list[EndpointSpec], where: str, resolver: Resolver | None
) -> BuiltDiscovery:
    """``inner`` wrapped to resolve host names, after checking that every name resolves now.

    ``where`` prefixes errors (the flag, or the flag and the file); for a file the entry is named.
    """
    resolution = NameResolution(_resolver(options, resolver))
    if not resolution.has_names(specs):
        if options.discovery_mode == "static":
            return BuiltDiscovery(inner)  # IP addresses only, and the list never changes
    else:
        try:
            await resolution.expand(specs, strict=True)
        except ResolutionError as exc:
            index = next(i for i, s in enumerate(specs) if s.address == exc.declared)
            entry = f"endpoints[{index}].address: " if options.discovery_mode == "file" else ""
            raise DiscoveryError(f"{where}: {entry}{exc}") from None
    wrapped = ResolvingDiscovery(inner, resolution, interval=options.endpoints_resolve_interval)
    return BuiltDiscovery(wrapped)


def build_config_discovery(options: Options, plugin: PluginSpec | None) -> BuiltDiscovery:
    """The ``dataLayer.discovery`` plugin's source, after loading its file once (any file or entry
    error fails the start, as upstream's initial load does). ``plugin`` None: no discovery at all."""
    if plugin is None:
        raise DiscoveryError(NO_ENDPOINTS)
    if options.discovery_mode != "config":
        flag = {"static": "--endpoints", "file": "--endpoints-file", "pool": "--pool-name"}.get(
            options.discovery_mode, "--endpoint-selector"
        )
        raise DiscoveryError(
            f"dataLayer.discovery ({plugin.name}) and {flag} both choose how endpoints are found: keep one"
        )
    path, watch = plugin.parameters["path"], plugin.parameters["watchFile"]
    multicluster = plugin.plugin_type == MULTICLUSTER_TYPE
    try:
        check_endpoints_file(path, multicluster=multicluster)
    except EndpointsFileError as exc:
        raise DiscoveryError(f"dataLayer.discovery ({plugin.plugin_type} {plugin.name!r}): {exc}") from None
    return BuiltDiscovery(FileDiscoveryPlugin(plugin.name, path, watch, multicluster=multicluster))


async def build_discovery(options: Options, *, resolver: Resolver | None = None) -> BuiltDiscovery:
    """The discovery source of ``options``; ``resolver`` replaces the system resolver (tests)."""
    mode = options.discovery_mode
    if mode == "config":
        raise DiscoveryError(NO_ENDPOINTS)
    if mode == "static":
        try:
            static = StaticDiscovery.from_addresses(options.endpoints)
        except ValueError as exc:
            raise DiscoveryError(f"--endpoints: {exc}") from None
        return await _standalone(options, static, list(static.specs), "--endpoints", resolver)
    if mode == "file":
        path = options.endpoints_file
        assert path is not None
        specs = _check_endpoints_file(path)
        return await _standalone(options, FileDiscovery(path), specs, f"--endpoints-file: {path}", resolver)
    flag = "--pool-name" if mode == "pool" else "--endpoint-selector"
    from datalayer.discovery.kube import KubePoolDiscovery, KubeSelectorDiscovery

    try:
        api_client = await kubernetes_client()
    except Exception as exc:
        raise DiscoveryError(f"{flag}: no Kubernetes API configuration ({exc})") from None
    try:
        if mode == "pool":
            assert options.pool_name is not None
            pool = KubePoolDiscovery(
                api_client, options.pool_namespace, options.pool_name, group=options.pool_group
            )
            return BuiltDiscovery(pool, api_client)
        assert options.endpoint_selector is not None
        selector = KubeSelectorDiscovery(
            api_client,
            options.pool_namespace,
            parse_label_selector(options.endpoint_selector),
            options.endpoint_target_ports,
        )
        return BuiltDiscovery(selector, api_client)
    except ValueError as exc:
        await api_client.close()
        raise DiscoveryError(f"{flag}: {exc}") from None
