"""``--ha-enable-leader-election``: campaign for the pool's Lease and gate readiness on leading.

Uses :class:`epp.ha.leader.LeaderElector` over the in-cluster (or kubeconfig) Kubernetes API. The
identity is ``$POD_NAME`` (the Downward API) or the host name, plus a random suffix so a restarted
container never inherits its predecessor's term. Readiness (``readiness``, ``""`` and the ext_proc
service) is SERVING only while this replica leads; ``liveness`` is unaffected.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from typing import Protocol

import structlog

from epp.ha.leader import KubernetesLeaseApi, LeaderElector, LeaseApi, default_lease_name
from epp.options import Options

__all__ = ["LeadershipTarget", "campaign", "run_leader_election"]

_log = structlog.get_logger("epp.ha")


class LeadershipTarget(Protocol):
    async def set_leader(self, leader: bool) -> None: ...


def _identity() -> str:
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


async def campaign(api: LeaseApi, identity: str, target: LeadershipTarget, **timing: float) -> None:
    """Run the election until cancelled, mirroring leadership into ``target`` in order.

    ``timing``: ``lease_duration_s``, ``renew_deadline_s``, ``retry_period_s`` (client-go defaults
    15 / 10 / 2 s). Cancelling releases the Lease and reports ``set_leader(False)``.
    """
    changes: asyncio.Queue[bool] = asyncio.Queue()
    elector = LeaderElector(
        api,
        identity,
        **timing,  # type: ignore[arg-type]
        on_started_leading=lambda: changes.put_nowait(True),
        on_stopped_leading=lambda: changes.put_nowait(False),
    )

    async def mirror() -> None:
        while True:
            await target.set_leader(await changes.get())

    mirroring = asyncio.create_task(mirror())
    try:
        await elector.run()
    finally:
        mirroring.cancel()
        while not changes.empty():
            await target.set_leader(changes.get_nowait())


async def run_leader_election(options: Options, target: LeadershipTarget) -> None:
    from epp.discovery import kubernetes_client

    name = default_lease_name(options.pool_namespace, options.pool_name or "standalone")
    async with await kubernetes_client() as api_client:
        api = KubernetesLeaseApi(api_client, options.pool_namespace, name)
        identity = _identity()
        _log.info("leader election started", lease=name, namespace=options.pool_namespace, identity=identity)
        await campaign(api, identity, target)
