"""Leader election and InferenceObjective watching against the fake Kubernetes API server.

Both go through the real kubernetes-asyncio client and the list/watch/PUT JSON of the API server.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import objects, running_fake_kube
from testutil import eventually as until

from epp.admission.objectives import InMemoryObjectiveStore
from epp.kubernetes.crd_watch import OBJECTIVE_GROUP, OBJECTIVE_PLURAL, OBJECTIVE_VERSION, ObjectiveWatch
from epp.kubernetes.leader import KubernetesLeaseApi, LeaderElector

TIMING = {"lease_duration_s": 0.8, "renew_deadline_s": 0.4, "retry_period_s": 0.05}


async def test_leases_created_renewed_and_taken_over() -> None:
    async with running_fake_kube() as (server, api):
        leases = server.store.register(*objects.LEASES)

        def lease() -> dict[str, Any]:
            return server.store.get(leases, "ns", "pool-lease")

        a = LeaderElector(KubernetesLeaseApi(api, "ns", "pool-lease"), "a", **TIMING)  # type: ignore[arg-type]
        b = LeaderElector(KubernetesLeaseApi(api, "ns", "pool-lease"), "b", **TIMING)  # type: ignore[arg-type]
        ta = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        created = lease()
        assert created["spec"]["holderIdentity"] == "a"
        tb = asyncio.create_task(b.run())
        await until(lambda: lease()["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"])
        renewed = lease()
        assert renewed["spec"]["holderIdentity"] == "a"  # renewed, not taken
        assert renewed["spec"]["renewTime"] != created["spec"]["renewTime"]
        assert renewed["spec"]["acquireTime"] == created["spec"]["acquireTime"]
        assert not b.is_leader
        # The leader dies without releasing: b takes over after the lease duration.
        ta.cancel()
        a.is_leader = False  # simulate a crash: no release happens below
        await asyncio.gather(ta, return_exceptions=True)
        await until(lambda: b.is_leader, timeout=5.0)
        taken = lease()
        assert taken["spec"]["holderIdentity"] == "b"
        assert taken["spec"]["leaseTransitions"] == 1
        # Graceful stop releases the lease.
        tb.cancel()
        await asyncio.gather(tb, return_exceptions=True)
        assert lease()["spec"]["holderIdentity"] == ""


def objective(name: str, priority: Any, pool: str = "pool-a", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{OBJECTIVE_GROUP}/{OBJECTIVE_VERSION}",
        "kind": "InferenceObjective",
        "metadata": {"name": name},
        "spec": {"priority": priority, "poolRef": {"name": pool}, **extra},
    }


async def test_objectives_follow_the_cluster() -> None:
    async with running_fake_kube() as (server, api):
        res = server.store.register(
            OBJECTIVE_GROUP, OBJECTIVE_VERSION, OBJECTIVE_PLURAL, "InferenceObjective"
        )
        server.store.apply(res, "ns", objective("critical", 10))
        server.store.apply(res, "ns", objective("batch", -1, criteria={"future": "field"}))
        server.store.apply(res, "ns", objective("other-pool", 5, pool="pool-b"))
        server.store.apply(res, "ns", objective("broken", "high"))
        store = InMemoryObjectiveStore()
        watch = ObjectiveWatch(api, "ns", "pool-a", store)
        task = asyncio.create_task(watch.run())
        try:
            await until(lambda: len(store) == 2)
            assert watch.synced
            critical, batch = store.get("critical"), store.get("batch")
            assert critical is not None and critical.priority == 10
            assert batch is not None and batch.priority == -1  # unknown spec fields are ignored
            assert store.get("other-pool") is None and store.get("broken") is None
            server.store.apply(res, "ns", objective("critical", 3))
            await until(lambda: (o := store.get("critical")) is not None and o.priority == 3)
            server.store.delete(res, "ns", "batch")
            await until(lambda: store.get("batch") is None)
            # The watch's resourceVersion is compacted away: relist, state stays right.
            server.store.expire_watches()
            server.store.apply(res, "ns", objective("new", 1))
            await until(lambda: store.get("new") is not None)
            assert watch.reflector.lists >= 2
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_picker_in_pool_mode_takes_priorities_from_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devtools.stack import free_ports
    from epp.app import build_app
    from epp.config.options import parse_options

    async with running_fake_kube() as (server, _api):
        kind = "InferenceObjective"
        res = server.store.register(OBJECTIVE_GROUP, OBJECTIVE_VERSION, OBJECTIVE_PLURAL, kind)
        server.store.register(*objects.INFERENCE_POOLS)
        server.store.register(*objects.CORE_PODS)
        server.store.apply(res, "ns", objective("critical", 10, pool="pool-a"))
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        for name in [n for n in os.environ if n.startswith("KUBERNETES_")]:
            monkeypatch.delenv(name)
        grpc_port, health_port, metrics_port = free_ports(3)
        argv = ["--pool-name", "pool-a", "--pool-namespace", "ns", "--secure-serving=false",
                "--host", "127.0.0.1", "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
                "--metrics-port", str(metrics_port)]  # fmt: skip
        app = await build_app(parse_options(argv))
        await app.start()
        try:
            store = app.objectives
            assert store is not None
            await until(lambda: store.get("critical") is not None)
            server.store.apply(res, "ns", objective("critical", -2, pool="pool-a"))
            await until(lambda: (o := store.get("critical")) is not None and o.priority == -2)
        finally:
            await app.stop()


def test_objectives_file_is_contradictory_in_pool_mode(tmp_path: Path) -> None:
    from epp.app import StartupError, build_app
    from epp.config.options import parse_options

    path = tmp_path / "objectives.yaml"
    path.write_text(yaml.safe_dump(objective("critical", 1)))
    options = parse_options(["--pool-name", "pool-a", "--objectives-file", str(path)])
    with pytest.raises(StartupError, match="cannot be combined with --pool-name"):
        asyncio.run(build_app(options))
