"""Endpoint discovery sources: static list, endpoints file, Kubernetes (InferencePool or selector)."""

from datalayer.discovery.base import Discovery, DiscoverySink, SpecTracker, make_spec, split_address
from datalayer.discovery.file import EndpointsFileError, FileDiscovery, load_endpoints_file
from datalayer.discovery.kube import KubePoolDiscovery, KubeSelectorDiscovery, parse_selector
from datalayer.discovery.static import StaticDiscovery, parse_endpoint_list

__all__ = [
    "Discovery",
    "DiscoverySink",
    "EndpointsFileError",
    "FileDiscovery",
    "KubePoolDiscovery",
    "KubeSelectorDiscovery",
    "SpecTracker",
    "StaticDiscovery",
    "load_endpoints_file",
    "make_spec",
    "parse_endpoint_list",
    "parse_selector",
    "split_address",
]
