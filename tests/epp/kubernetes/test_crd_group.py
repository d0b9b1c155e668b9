"""InferenceObjective / InferenceModelRewrite in llm-d-router's ``llm-d.ai/v1alpha2`` group and GIE's
``inference.networking.x-k8s.io/v1alpha2``, against the fake Kubernetes API server (real
kubernetes-asyncio client): the group llm-d-router prefers is watched, the legacy one when it is the
only one, and neither CRD ends each watch at once with one log line (pkg/epp/server/controller_config.go
of llm-d-router ebab68792: populateWithDiscovery)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from fakekube import running_fake_kube
from testutil import eventually as until

from epp.admission.objectives import InMemoryObjectiveStore
from epp.admission.objectives_file import load_objectives_file
from epp.admission.rewrites import RewriteStore
from epp.kubernetes.crd_group import LEGACY_GROUP, LLMD_GROUP, VERSION, served_group
from epp.kubernetes.crd_watch import OBJECTIVE_PLURAL, REWRITE_PLURAL, ObjectiveWatch, RewriteWatch

OBJECTIVE, REWRITE = "InferenceObjective", "InferenceModelRewrite"


def objective(group: str, name: str, priority: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{group}/{VERSION}",
        "kind": OBJECTIVE,
        "metadata": {"name": name},
        "spec": {"priority": priority, "poolRef": {"name": "pool-a"}},
    }


def rewrite(group: str, name: str, target: str) -> dict[str, Any]:
    rule = {
        "matches": [{"model": {"type": "Exact", "value": "alias"}}],
        "targets": [{"modelRewrite": target}],
    }
    return {
        "apiVersion": f"{group}/{VERSION}",
        "kind": REWRITE,
        "metadata": {"name": name, "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {"poolRef": {"name": "pool-a"}, "rules": [rule]},
    }


@pytest.mark.parametrize(
    ("served", "want"),
    [
        ((LLMD_GROUP,), LLMD_GROUP),
        ((LEGACY_GROUP,), LEGACY_GROUP),
        ((LEGACY_GROUP, LLMD_GROUP), LLMD_GROUP),  # both: the new group wins
        ((), None),
    ],
)
async def test_served_group_prefers_llm_d(served: tuple[str, ...], want: str | None) -> None:
    async with running_fake_kube() as (server, api):
        for group in served:
            server.store.register(group, VERSION, OBJECTIVE_PLURAL, OBJECTIVE)
        with structlog.testing.capture_logs() as logs:
            assert await served_group(api, "ns", OBJECTIVE_PLURAL, OBJECTIVE) == want
        warned = [e["event"] for e in logs if e["log_level"] == "warning"]
        assert bool(warned) == (len(served) == 2)
        if warned:
            assert "ignoring the legacy objects" in warned[0]


async def test_served_group_retries_until_the_api_server_answers() -> None:
    sleeps: list[float] = []
    async with running_fake_kube() as (server, api):
        server.store.register(LLMD_GROUP, VERSION, OBJECTIVE_PLURAL, OBJECTIVE)
        server.stall()  # the server stops answering

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            if len(sleeps) == 2:
                server.resume()

        group = await asyncio.wait_for(
            served_group(api, "ns", OBJECTIVE_PLURAL, OBJECTIVE, sleep=sleep, timeout=0.2), 30
        )
    assert group == LLMD_GROUP
    assert sleeps[:2] == [0.5, 1.0]


async def test_objectives_and_rewrites_are_watched_in_the_llm_d_group_and_legacy_objects_ignored() -> None:
    async with running_fake_kube() as (server, api):
        new_o = server.store.register(LLMD_GROUP, VERSION, OBJECTIVE_PLURAL, OBJECTIVE)
        old_o = server.store.register(LEGACY_GROUP, VERSION, OBJECTIVE_PLURAL, OBJECTIVE)
        new_r = server.store.register(LLMD_GROUP, VERSION, REWRITE_PLURAL, REWRITE)
        old_r = server.store.register(LEGACY_GROUP, VERSION, REWRITE_PLURAL, REWRITE)
        server.store.apply(new_o, "ns", objective(LLMD_GROUP, "critical", 10))
        server.store.apply(old_o, "ns", objective(LEGACY_GROUP, "legacy", 5))
        server.store.apply(new_r, "ns", rewrite(LLMD_GROUP, "canary", "v2"))
        server.store.apply(old_r, "ns", rewrite(LEGACY_GROUP, "old", "v1"))
        objectives, rewrites = InMemoryObjectiveStore(), RewriteStore()
        o_watch = ObjectiveWatch(api, "ns", "pool-a", objectives)
        r_watch = RewriteWatch(api, "ns", "pool-a", rewrites)
        tasks = [asyncio.create_task(o_watch.run()), asyncio.create_task(r_watch.run())]
        try:
            await until(lambda: o_watch.synced and r_watch.synced)
            assert (o_watch.group, r_watch.group) == (LLMD_GROUP, LLMD_GROUP)
            critical = objectives.get("critical")
            assert critical is not None and critical.priority == 10
            assert objectives.get("legacy") is None and len(objectives) == 1
            assert [r.name for r in rewrites.rewrites] == ["canary"]
            server.store.apply(new_o, "ns", objective(LLMD_GROUP, "later", 1))  # the watch follows the group
            await until(lambda: objectives.get("later") is not None)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_legacy_group_alone_is_watched() -> None:
    async with running_fake_kube() as (server, api):
        res = server.store.register(LEGACY_GROUP, VERSION, OBJECTIVE_PLURAL, OBJECTIVE)
        server.store.apply(res, "ns", objective(LEGACY_GROUP, "legacy", 5))
        store = InMemoryObjectiveStore()
        watch = ObjectiveWatch(api, "ns", "pool-a", store)
        task = asyncio.create_task(watch.run())
        try:
            await until(lambda: store.get("legacy") is not None)
            assert watch.group == LEGACY_GROUP
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_no_objective_crd_ends_the_watch_with_one_log_line() -> None:
    async with running_fake_kube() as (_server, api):
        watch = ObjectiveWatch(api, "ns", "pool-a", InMemoryObjectiveStore())
        with structlog.testing.capture_logs() as logs:
            await asyncio.wait_for(watch.run(), 10)
        assert not watch.synced and watch.reflector.lists == 0
        assert [e["event"] for e in logs if e["log_level"] != "debug"] == [
            "InferenceObjective CRD not installed; objectives are not watched"
        ]


def test_objectives_file_takes_the_llm_d_group(tmp_path: Path) -> None:
    path = tmp_path / "objectives.yaml"
    path.write_text(yaml.safe_dump(objective(LLMD_GROUP, "critical", 7)))
    [loaded] = load_objectives_file(str(path))
    assert (loaded.name, loaded.priority) == ("critical", 7)
