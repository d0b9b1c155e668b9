"""A reusable fake Kubernetes API server for tests (list/watch JSON over HTTP, 410, 409).

Import as ``fakekube`` with ``tests/`` on ``sys.path`` (see tests/datalayer/conftest.py)::

    from fakekube import FakeKubeStore, running_fake_kube, objects

    async with running_fake_kube() as (server, api_client):
        pods = server.store.register("", "v1", "pods", "Pod")
        server.store.apply(pods, "default", objects.pod("vllm-0", "10.0.0.1", {"app": "vllm"}))
"""

from fakekube import objects
from fakekube.server import FakeKubeServer, running_fake_kube
from fakekube.store import Conflict, Event, FakeKubeStore, NotFound, Resource, Watcher

__all__ = [
    "Conflict",
    "Event",
    "FakeKubeServer",
    "FakeKubeStore",
    "NotFound",
    "Resource",
    "Watcher",
    "objects",
    "running_fake_kube",
]
