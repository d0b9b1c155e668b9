"""The Kubernetes API client every Kubernetes-mode part of the picker uses (discovery, leader election,
the InferenceObjective / InferenceModelRewrite watches)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["kubernetes_client"]


async def kubernetes_client() -> Any:
    """An ``ApiClient`` from the in-cluster service account, else the kubeconfig (``$KUBECONFIG``, else
    ``~/.kube/config``). Call it on the running loop; the caller closes the client."""
    from kubernetes_asyncio import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    return client.ApiClient()
