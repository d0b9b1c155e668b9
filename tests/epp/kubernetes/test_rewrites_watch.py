"""InferenceModelRewrite watching against the fake Kubernetes API server (real kubernetes-asyncio client,
real list/watch JSON), and the picker in InferencePool mode following the cluster's objects."""

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

from epp.admission.rewrites import RewriteStore
from epp.kubernetes.crd_watch import REWRITE_GROUP, REWRITE_PLURAL, REWRITE_VERSION, RewriteWatch

KIND = "InferenceModelRewrite"


def rewrite(
    name: str,
    created: str,
    target: str,
    model: str | None = "alias",
    pool: str = "pool-a",
    group: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": pool} if group is None else {"name": pool, "group": group}
    rule: dict[str, Any] = {"targets": [{"modelRewrite": target}]}
    if model is not None:
        rule["matches"] = [{"model": {"type": "Exact", "value": model}}]
    return {
        "apiVersion": f"{REWRITE_GROUP}/{REWRITE_VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"poolRef": ref, "rules": [rule], **extra},
    }


def target(store: RewriteStore, model: str) -> tuple[str, str] | None:
    hit = store.rule_for(model)
    return None if hit is None else (hit[1], hit[0].targets[0].model)


async def test_rewrites_follow_the_cluster() -> None:
    async with running_fake_kube() as (server, api):
        res = server.store.register(REWRITE_GROUP, REWRITE_VERSION, REWRITE_PLURAL, KIND)
        apply = server.store.apply
        apply(res, "ns", rewrite("newer", "2025-02-01T00:00:00Z", "from-newer"))
        apply(res, "ns", rewrite("older", "2025-01-01T00:00:00Z", "from-older", future={"field": 1}))
        apply(res, "ns", rewrite("other-pool", "2024-01-01T00:00:00Z", "from-other-pool", pool="pool-b"))
        apply(res, "ns", rewrite("other-group", "2024-01-01T00:00:00Z", "x", group="example.com"))
        apply(res, "ns", rewrite("generic", "2025-03-01T00:00:00Z", "fallback", model=None))
        broken = rewrite("broken", "2020-01-01T00:00:00Z", "x")
        broken["spec"]["rules"][0]["targets"] = []
        apply(res, "ns", broken)
        store = RewriteStore()
        watch = RewriteWatch(api, "ns", "pool-a", store)
        task = asyncio.create_task(watch.run())
        try:
            await until(lambda: len(store) == 3)
            assert watch.synced
            assert {r.name for r in store.rewrites} == {"newer", "older", "generic"}
            assert target(store, "alias") == ("older", "from-older")  # oldest wins; unknown field ignored
            assert target(store, "anything") == ("generic", "fallback")
            # Updated in place: the new rules apply.
            apply(res, "ns", rewrite("older", "2025-01-01T00:00:00Z", "from-older-v2"))
            await until(lambda: target(store, "alias") == ("older", "from-older-v2"))
            # Moved to another pool: it leaves this pool's set, the next oldest takes over.
            apply(res, "ns", rewrite("older", "2025-01-01T00:00:00Z", "from-older-v2", pool="pool-b"))
            await until(lambda: target(store, "alias") == ("newer", "from-newer"))
            server.store.delete(res, "ns", "newer")
            await until(lambda: target(store, "alias") == ("generic", "fallback"))
            # The watch's resourceVersion is compacted away: relist, state stays right.
            server.store.expire_watches()
            apply(res, "ns", rewrite("late", "2026-01-01T00:00:00Z", "from-late"))
            await until(lambda: target(store, "alias") == ("late", "from-late"))
            assert watch.reflector.lists >= 2
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_no_crd_means_no_watch() -> None:
    """GIE starts its reconciler only when discovery finds the kind: a 404 ends the watch at once."""
    async with running_fake_kube() as (_server, api):
        watch = RewriteWatch(api, "ns", "pool-a", RewriteStore())
        await asyncio.wait_for(watch.run(), 10)
        assert not watch.synced


def _kubeconfig(path: Path, url: str) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "fake", "user": {"token": "fake"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )
    )


async def test_picker_in_pool_mode_rewrites_as_the_cluster_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devtools.stack import free_ports
    from epp.app import build_app
    from epp.config.options import parse_options

    async with running_fake_kube() as (server, _api):
        res = server.store.register(REWRITE_GROUP, REWRITE_VERSION, REWRITE_PLURAL, KIND)
        server.store.register(*objects.INFERENCE_POOLS)
        server.store.register(*objects.CORE_PODS)
        server.store.apply(res, "ns", rewrite("canary", "2025-01-01T00:00:00Z", "v1"))
        _kubeconfig(tmp_path / "kubeconfig", server.url)
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
        for name in [n for n in os.environ if n.startswith("KUBERNETES_")]:
            monkeypatch.delenv(name)
        grpc_port, health_port, metrics_port = free_ports(3)
        argv = ["--pool-name", "pool-a", "--pool-namespace", "ns", "--secure-serving=false",
                "--host", "127.0.0.1", "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
                "--metrics-port", str(metrics_port)]  # fmt: skip
        app = await build_app(parse_options(argv))
        await app.start()
        try:
            store = app.rewrites
            assert store is not None
            await until(lambda: target(store, "alias") == ("canary", "v1"))
            server.store.apply(res, "ns", rewrite("canary", "2025-01-01T00:00:00Z", "v2"))
            await until(lambda: target(store, "alias") == ("canary", "v2"))
        finally:
            await app.stop()


def test_rewrites_file_is_contradictory_in_pool_mode(tmp_path: Path) -> None:
    from epp.app import StartupError, build_app
    from epp.config.options import parse_options

    path = tmp_path / "rewrites.yaml"
    path.write_text(yaml.safe_dump(rewrite("canary", "2025-01-01T00:00:00Z", "v1")))
    options = parse_options(["--pool-name", "pool-a", "--model-rewrites-file", str(path)])
    with pytest.raises(StartupError, match="--model-rewrites-file cannot be combined with --pool-name"):
        asyncio.run(build_app(options))


def test_invalid_rewrites_file_stops_the_start(tmp_path: Path) -> None:
    from epp.app import StartupError, build_app
    from epp.config.options import parse_options

    doc = rewrite("canary", "2025-01-01T00:00:00Z", "v1")
    doc["spec"]["rules"][0]["targets"][0]["weight"] = 0
    path = tmp_path / "rewrites.yaml"
    path.write_text(yaml.safe_dump(doc))
    options = parse_options(["--endpoints", "127.0.0.1:1", "--model-rewrites-file", str(path)])
    want = (
        f"--model-rewrites-file: {path}: documents\\[0\\].spec.rules\\[0\\].targets\\[0\\].weight: expected"
    )
    with pytest.raises(StartupError, match=want):
        asyncio.run(build_app(options))
