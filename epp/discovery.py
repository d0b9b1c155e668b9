"""Choose the data layer's discovery source from the command line (exactly one mode, see epp.options).

* ``--endpoints a:1,b:2``: :class:`datalayer.StaticDiscovery`;
* ``--endpoints-file PATH``: the data layer's file discovery (YAML/JSON, watched for changes);
* ``--pool-name``: Kubernetes InferencePool discovery in ``--pool-namespace`` / ``--pool-group``;
* ``--endpoint-selector`` + ``--endpoint-target-ports``: Kubernetes pod-selector discovery.

Raises :class:`DiscoveryError` naming the flag when the source cannot be built (e.g. an invalid
address, or no Kubernetes configuration in the environment).
"""

from __future__ import annotations

import importlib
from typing import Any

from datalayer import Discovery, StaticDiscovery
from epp.options import Options

__all__ = ["DiscoveryError", "build_discovery"]


class DiscoveryError(Exception):
    """Discovery cannot be set up; the message names the flag."""


def _datalayer(name: str, flag: str) -> Any:
    module = importlib.import_module("datalayer.discovery")
    factory = getattr(module, name, None)
    if factory is None:
        raise DiscoveryError(f"{flag}: this build of the data layer has no {name}")
    return factory


def build_discovery(options: Options) -> Discovery:
    mode = options.discovery_mode
    try:
        if mode == "static":
            return StaticDiscovery.from_addresses(options.endpoints)
        if mode == "file":
            file_discovery = _datalayer("FileDiscovery", "--endpoints-file")
            return file_discovery(options.endpoints_file)  # type: ignore[no-any-return]
        if mode == "pool":
            pool = _datalayer("KubePoolDiscovery", "--pool-name")
            return pool(  # type: ignore[no-any-return]
                name=options.pool_name, namespace=options.pool_namespace, group=options.pool_group
            )
        selector = _datalayer("KubeSelectorDiscovery", "--endpoint-selector")
        return selector(  # type: ignore[no-any-return]
            selector=options.endpoint_selector,
            target_ports=options.endpoint_target_ports,
            namespace=options.pool_namespace,
        )
    except ValueError as exc:
        flag = {"static": "--endpoints", "file": "--endpoints-file", "pool": "--pool-name"}.get(
            mode, "--endpoint-selector"
        )
        raise DiscoveryError(f"{flag}: {exc}") from None
