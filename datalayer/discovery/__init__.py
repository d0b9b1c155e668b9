"""Endpoint discovery sources: static list, endpoints file, Kubernetes (InferencePool or selector).

The standalone sources (static list, file) may name hosts; :class:`ResolvingDiscovery` wraps them and
resolves the names into ``ip:port`` endpoints through a :class:`Resolver` (see :mod:`.names`).
"""

from datalayer.discovery.base import (
    Discovery,
    DiscoverySink,
    SpecTracker,
    is_ip_literal,
    join_address,
    make_spec,
    split_address,
)
from datalayer.discovery.file import EndpointsFileError, FileDiscovery, load_endpoints_file
from datalayer.discovery.kube import KubePoolDiscovery, KubeSelectorDiscovery, parse_selector
from datalayer.discovery.names import MAX_ADDRESSES_PER_NAME, NameResolution, ResolutionError
from datalayer.discovery.resolve import (
    HostsFileError,
    HostsFileResolver,
    ResolveError,
    Resolver,
    SystemResolver,
)
from datalayer.discovery.resolving import ResolvingDiscovery
from datalayer.discovery.static import StaticDiscovery, parse_endpoint_list

__all__ = [
    "MAX_ADDRESSES_PER_NAME",
    "Discovery",
    "DiscoverySink",
    "EndpointsFileError",
    "FileDiscovery",
    "HostsFileError",
    "HostsFileResolver",
    "KubePoolDiscovery",
    "KubeSelectorDiscovery",
    "NameResolution",
    "ResolutionError",
    "ResolveError",
    "Resolver",
    "ResolvingDiscovery",
    "SpecTracker",
    "StaticDiscovery",
    "SystemResolver",
    "is_ip_literal",
    "join_address",
    "load_endpoints_file",
    "make_spec",
    "parse_endpoint_list",
    "parse_selector",
    "split_address",
]
