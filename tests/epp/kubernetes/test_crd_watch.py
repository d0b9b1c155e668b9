"""The one pool-scoped CRD watch both kinds use: what it keeps, and its bounded memory of reported
problems (each distinct problem logged once; at most REPORTED_BUDGET remembered), driven without an API
server by filling the reflector's objects and calling the change hook."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from structlog.testing import capture_logs

from epp.admission.objectives import InMemoryObjectiveStore
from epp.admission.rewrites import RewriteStore
from epp.kubernetes.crd_watch import (
    OBJECTIVE_GROUP,
    REPORTED_BUDGET,
    REWRITE_GROUP,
    ObjectiveWatch,
    PoolScopedWatch,
    RewriteWatch,
)


@pytest.fixture
async def api() -> AsyncIterator[Any]:
    api_client = client.ApiClient()  # never called: the tests drive the change hook directly
    yield api_client
    await api_client.close()


def objective(name: str, priority: Any, pool: str = "pool-a") -> dict[str, Any]:
    return {
        "apiVersion": f"{OBJECTIVE_GROUP}/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": {"name": name},
        "spec": {"priority": priority, "poolRef": {"name": pool}, "addedLater": True},
    }


def rewrite(name: str, targets: list[dict[str, Any]], pool: str = "pool-a") -> dict[str, Any]:
    return {
        "apiVersion": f"{REWRITE_GROUP}/v1alpha2",
        "kind": "InferenceModelRewrite",
        "metadata": {"name": name, "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {"poolRef": {"name": pool}, "rules": [{"targets": targets}]},
    }


def changed(watch: PoolScopedWatch[Any], objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run the change hook over ``objects``; the error log lines it wrote."""
    watch.reflector.objects = {o["metadata"]["name"]: o for o in objects}
    with capture_logs() as logs:
        watch._changed()
    return [line for line in logs if line["log_level"] == "error"]


async def test_objectives_of_this_pool_are_kept_and_unknown_spec_fields_ignored(api: Any) -> None:
    store = InMemoryObjectiveStore()
    watch = ObjectiveWatch(api, "ns", "pool-a", store)
    errors = changed(watch, [objective("mine", 5), objective("theirs", 7, pool="pool-b")])
    assert errors == []
    mine = store.get("mine")
    assert (len(store), mine and mine.priority, store.get("theirs")) == (1, 5, None)


async def test_an_invalid_object_is_reported_once_and_the_others_still_apply(api: Any) -> None:
    store = InMemoryObjectiveStore()
    watch = ObjectiveWatch(api, "ns", "pool-a", store)
    objects = [objective("good", 1), objective("bad", "high")]
    first = changed(watch, objects)
    again = changed(watch, objects)
    assert [e["event"] for e in first] == ["ignoring invalid InferenceObjective"]
    assert "expected an integer" in first[0]["error"]
    assert again == []
    assert (len(store), store.get("good") is not None) == (1, True)


@pytest.mark.parametrize("kind", ["objectives", "rewrites"])
async def test_the_memory_of_reported_problems_is_bounded(api: Any, kind: str) -> None:
    watch: PoolScopedWatch[Any]
    if kind == "objectives":
        watch = ObjectiveWatch(api, "ns", "pool-a", InMemoryObjectiveStore())
        objects = [objective(f"o{i}", f"p{i}") for i in range(REPORTED_BUDGET + 10)]
    else:
        watch = RewriteWatch(api, "ns", "pool-a", RewriteStore())
        objects = [rewrite(f"r{i}", []) for i in range(REPORTED_BUDGET + 10)]
    errors = changed(watch, objects)
    assert len(errors) == REPORTED_BUDGET + 10  # every distinct problem logged the first time
    assert len({e["error"] for e in errors}) == REPORTED_BUDGET + 10
    assert 0 < len(watch._reported) <= REPORTED_BUDGET
