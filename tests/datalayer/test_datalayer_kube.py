"""Kubernetes discovery against the fake API server: pods, InferencePool, dropped watches, 410 Gone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from fakekube import FakeKubeServer, objects, running_fake_kube
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from testutil import eventually as until

from datalayer.discovery.kube import KubePoolDiscovery, KubeSelectorDiscovery, parse_selector, pod_endpoints
from datalayer.records import DiscoveryEvent, EndpointSpec, EventKind

NS = "inference"
ENGINE = "inference.networking.k8s.io/engine-type"


class Sink:
    def __init__(self) -> None:
        self.endpoints: dict[str, EndpointSpec] = {}
        self.synced = False
        self.batches = 0

    def apply(self, events: Sequence[DiscoveryEvent]) -> None:
        self.batches += 1
        for e in events:
            if e.kind is EventKind.REMOVED:
                del self.endpoints[e.spec.address]
            else:
                self.endpoints[e.spec.address] = e.spec

    def current(self) -> dict[str, EndpointSpec]:
        return dict(self.endpoints)

    def mark_synced(self) -> None:
        self.synced = True

    def names(self) -> dict[str, str]:
        return {a: s.name for a, s in self.endpoints.items()}


@pytest.fixture
async def kube() -> AsyncIterator[tuple[FakeKubeServer, Any]]:
    async with running_fake_kube() as (server, api):
        server.store.register(*objects.CORE_PODS)
        server.store.register(*objects.INFERENCE_POOLS)
        server.store.register(*objects.LEASES)
        yield server, api


def _lists(requests: list[tuple[str, str]]) -> list[str]:
    return [p for m, p in requests if m == "GET" and "watch=" not in p.lower()]


def _pods(server: FakeKubeServer) -> tuple[str, str, str]:
    return objects.CORE_PODS[:3]


async def _run(discovery: Any, sink: Sink) -> asyncio.Task[None]:
    return asyncio.create_task(discovery.run(sink))


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_pod_endpoints_rules() -> None:
    pod = objects.pod(
        "p",
        "10.1.0.1",
        {"app": "x", ENGINE: "sglang"},
        annotations={"inference.networking.k8s.io/active-ports": "8000,8002"},
    )
    specs = pod_endpoints(pod, [8000, 8001, 8002])
    assert [(s.address, s.name, s.engine) for s in specs] == [
        ("10.1.0.1:8000", "p-rank-0", "sglang"),
        ("10.1.0.1:8002", "p-rank-2", "sglang"),
    ]
    assert {(s.pod_name, s.node_address) for s in specs} == {("p", "")}  # no status.hostIP in the fake
    with_node = {**pod, "status": {**pod["status"], "hostIP": "192.168.0.9"}}
    assert pod_endpoints(with_node, [8000])[0].node_address == "192.168.0.9"  # dcgm useNodeAddress
    assert pod_endpoints(objects.pod("p", "10.1.0.1", {}, ready=False), [8000]) == []
    assert pod_endpoints(objects.pod("p", "10.1.0.1", {}, terminating=True), [8000]) == []
    assert pod_endpoints(objects.pod("p", None, {}), [8000]) == []
    assert pod_endpoints(objects.pod("p", "fd00::1", {}), [8000])[0].address == "[fd00::1]:8000"
    assert parse_selector("app=vllm, tier = gpu") == {"app": "vllm", "tier": "gpu"}
    with pytest.raises(ValueError, match="key=value"):
        parse_selector("app")


async def test_selector_mode_follows_pod_lifecycle(kube: tuple[FakeKubeServer, Any]) -> None:
    server, api = kube
    store, pods = server.store, _pods(server)
    store.apply(pods, NS, objects.pod("a", "10.0.0.1", {"app": "vllm"}))
    store.apply(pods, NS, objects.pod("other", "10.0.0.9", {"app": "web"}))
    store.apply(pods, "elsewhere", objects.pod("c", "10.0.0.8", {"app": "vllm"}))
    sink = Sink()
    task = await _run(KubeSelectorDiscovery(api, NS, {"app": "vllm"}, [8000, 8001]), sink)
    try:
        await until(lambda: sink.synced)
        assert sink.names() == {"10.0.0.1:8000": "a-rank-0", "10.0.0.1:8001": "a-rank-1"}
        store.apply(pods, NS, objects.pod("b", "10.0.0.2", {"app": "vllm"}, ready=False))
        store.apply(pods, NS, objects.pod("b", "10.0.0.2", {"app": "vllm"}))
        await until(lambda: "10.0.0.2:8000" in sink.endpoints)
        store.apply(pods, NS, objects.pod("a", "10.0.0.1", {"app": "vllm"}, terminating=True))
        await until(lambda: "10.0.0.1:8000" not in sink.endpoints)
        store.apply(pods, NS, objects.pod("b", "10.0.0.2", {"app": "vllm", ENGINE: "sglang"}))
        await until(lambda: sink.endpoints["10.0.0.2:8000"].engine == "sglang")
        store.apply(pods, NS, objects.pod("b", "10.0.0.2", {"app": "moved"}))  # leaves the selector
        await until(lambda: not sink.endpoints)
    finally:
        await _stop(task)


async def test_pool_mode_watches_pool_and_pods(kube: tuple[FakeKubeServer, Any]) -> None:
    server, api = kube
    store, pods, pools = server.store, _pods(server), objects.INFERENCE_POOLS[:3]
    store.apply(pods, NS, objects.pod("v1", "10.0.0.1", {"app": "vllm"}))
    store.apply(pods, NS, objects.pod("s1", "10.0.0.2", {"app": "sgl"}))
    sink = Sink()
    task = await _run(KubePoolDiscovery(api, NS, "pool"), sink)
    try:
        await until(lambda: sink.synced)  # pool absent: synced with no endpoints
        assert sink.endpoints == {}
        store.apply(pools, NS, objects.inference_pool("pool", {"app": "vllm"}, [8000]))
        await until(lambda: sink.names() == {"10.0.0.1:8000": "v1-rank-0"})
        store.apply(pools, NS, objects.inference_pool("pool", {"app": "sgl"}, [9000, 9001]))
        await until(lambda: sink.names() == {"10.0.0.2:9000": "s1-rank-0", "10.0.0.2:9001": "s1-rank-1"})
        bad = objects.inference_pool("pool", {"app": "sgl"}, [])
        store.apply(pools, NS, bad)  # invalid: the last endpoints stay
        store.apply(pods, NS, objects.pod("s2", "10.0.0.3", {"app": "sgl"}))
        await asyncio.sleep(0.1)
        assert set(sink.endpoints) == {"10.0.0.2:9000", "10.0.0.2:9001"}
        store.apply(pools, NS, objects.inference_pool("pool", {"app": "sgl"}, [9000]))
        await until(lambda: set(sink.endpoints) == {"10.0.0.2:9000", "10.0.0.3:9000"})
        store.delete(pools, NS, "pool")
        await until(lambda: sink.endpoints == {})
    finally:
        await _stop(task)


async def test_dropped_watch_resumes_without_relisting(kube: tuple[FakeKubeServer, Any]) -> None:
    server, api = kube
    store, pods = server.store, _pods(server)
    store.apply(pods, NS, objects.pod("a", "10.0.0.1", {"app": "vllm"}))
    sink = Sink()
    task = await _run(KubeSelectorDiscovery(api, NS, {"app": "vllm"}, [8000]), sink)
    try:
        await until(lambda: sink.synced and bool(store.watchers))
        store.bookmark()
        store.drop_watches()
        store.apply(pods, NS, objects.pod("b", "10.0.0.2", {"app": "vllm"}))  # while no watch is open
        await until(lambda: "10.0.0.2:8000" in sink.endpoints)
        lists = _lists(store.requests)
        watches = [p for m, p in store.requests if "watch=true" in p.lower()]
        assert len(lists) == 1 and len(watches) >= 2
        assert "resourceVersion=" in watches[-1]
    finally:
        await _stop(task)


async def test_410_gone_relists_and_catches_up(kube: tuple[FakeKubeServer, Any]) -> None:
    server, api = kube
    store, pods = server.store, _pods(server)
    store.apply(pods, NS, objects.pod("a", "10.0.0.1", {"app": "vllm"}))
    sink = Sink()
    task = await _run(KubeSelectorDiscovery(api, NS, {"app": "vllm"}, [8000]), sink)
    try:
        await until(lambda: sink.synced and bool(store.watchers))
        store.expire_watches()  # the open watch gets ERROR 410 before the changes below
        store.delete(pods, NS, "a")
        store.apply(pods, NS, objects.pod("b", "10.0.0.2", {"app": "vllm"}))
        store.compact()
        await until(lambda: set(sink.endpoints) == {"10.0.0.2:8000"})
        lists = _lists(store.requests)
        assert len(lists) == 2
        store.apply(pods, NS, objects.pod("c", "10.0.0.3", {"app": "vllm"}))
        await until(lambda: set(sink.endpoints) == {"10.0.0.2:8000", "10.0.0.3:8000"})
    finally:
        await _stop(task)


async def test_410_while_not_watching_forces_relist(kube: tuple[FakeKubeServer, Any]) -> None:
    server, api = kube
    store, pods = server.store, _pods(server)
    store.apply(pods, NS, objects.pod("a", "10.0.0.1", {"app": "vllm"}))
    sink = Sink()
    task = await _run(KubeSelectorDiscovery(api, NS, {"app": "vllm"}, [8000]), sink)
    try:
        await until(lambda: sink.synced and bool(store.watchers))
        store.apply(pods, NS, objects.pod("b", "10.0.0.2", {"app": "vllm"}))
        await until(lambda: "10.0.0.2:8000" in sink.endpoints)
        store.drop_watches()  # the watch closes before it sees the deletion ...
        store.delete(pods, NS, "a")
        store.compact()  # ... and resuming from its version now gets 410 -> relist
        await until(lambda: set(sink.endpoints) == {"10.0.0.2:8000"})
        await until(lambda: len(_lists(store.requests)) == 2)
    finally:
        await _stop(task)


async def test_fakekube_crud_conflicts_and_watch_json(kube: tuple[FakeKubeServer, Any]) -> None:
    _, api = kube
    coord = k8s.CoordinationV1Api(api)
    created = await coord.create_namespaced_lease(NS, objects.lease("epp", "me"))
    assert created.spec.holder_identity == "me"
    with pytest.raises(ApiException) as err:
        await coord.create_namespaced_lease(NS, objects.lease("epp", "you"))
    assert err.value.status == 409
    stale = objects.lease("epp", "you")
    stale["metadata"]["resourceVersion"] = "1"
    with pytest.raises(ApiException) as err:
        await coord.replace_namespaced_lease("epp", NS, stale)
    assert err.value.status == 409 and "modified" in json.loads(err.value.body)["message"]
    current = objects.lease("epp", "you")
    current["metadata"]["resourceVersion"] = created.metadata.resource_version
    replaced = await coord.replace_namespaced_lease("epp", NS, current)
    assert replaced.spec.holder_identity == "you"
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as err:
        await coord.read_namespaced_lease("nope", NS)
    assert err.value.status == 404
    with pytest.raises(ApiException) as err:
        await k8s.CustomObjectsApi(api).list_namespaced_custom_object("x.io", "v1", NS, "things")
    assert err.value.status == 404


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [{"number": 8000}, {"number": 8001}]},
            ({"app": "x"}, (8000, 8001)),
        ),
        ({"selector": {"app": "x"}, "targetPortNumber": 9000}, ({"app": "x"}, (9000,))),
    ],
)
def test_pool_spec_shapes(spec: dict[str, Any], expected: tuple[dict[str, str], tuple[int, ...]]) -> None:
    from datalayer.discovery.kube import _pool_target

    assert _pool_target({"spec": spec}) == expected


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"selector": {"matchLabels": {}}, "targetPorts": [{"number": 1}]}, "spec.selector.matchLabels"),
        ({"selector": {"app": 3}, "targetPortNumber": 1}, "spec.selector"),
        ({"selector": {"app": "x"}, "targetPorts": []}, "spec.targetPorts"),
        ({"selector": {"app": "x"}, "targetPorts": [{"number": 1}] * 9}, "spec.targetPorts"),
        ({"selector": {"app": "x"}, "targetPorts": [{"number": 70000}]}, "spec.targetPorts[0].number"),
        ({"selector": {"app": "x"}, "targetPortNumber": "80"}, "spec.targetPortNumber"),
    ],
)
def test_pool_spec_errors_name_the_field(spec: dict[str, Any], field: str) -> None:
    from datalayer.discovery.kube import _pool_target

    with pytest.raises(ValueError) as err:
        _pool_target({"spec": spec})
    assert str(err.value).startswith(field + ":")


async def test_v1alpha2_pool_group(kube: tuple[FakeKubeServer, Any]) -> None:
    server, api = kube
    store, pods = server.store, _pods(server)
    pools = store.register("inference.networking.x-k8s.io", "v1alpha2", "inferencepools", "InferencePool")
    store.apply(pods, NS, objects.pod("v1", "10.0.0.1", {"app": "vllm"}))
    store.apply(
        pools,
        NS,
        {"metadata": {"name": "old"}, "spec": {"selector": {"app": "vllm"}, "targetPortNumber": 8000}},
    )
    sink = Sink()
    task = await _run(KubePoolDiscovery(api, NS, "old", group="inference.networking.x-k8s.io"), sink)
    try:
        await until(lambda: sink.names() == {"10.0.0.1:8000": "v1-rank-0"})
    finally:
        await _stop(task)
