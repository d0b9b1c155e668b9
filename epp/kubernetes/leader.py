"""Active-passive high availability (``--ha-enable-leader-election``): leader election with a Kubernetes
Lease, and readiness gated on leading.

Semantics follow client-go's ``leaderelection`` package, so our replicas interoperate with the usual
expectations of Kubernetes operators:

* A candidate reads the Lease. If nobody holds it, or the holder has not renewed it for
  ``lease_duration`` *as observed locally* (the time we last saw the record change, on our own
  monotonic clock: no trust in other nodes' clocks), the candidate writes itself as holder using the
  Lease's ``resourceVersion`` (optimistic concurrency: a concurrent writer gets 409 and loses).
* The leader renews every ``retry_period``. If it cannot renew for ``renew_deadline`` it steps down
  (``on_stopped_leading``) and becomes a candidate again.
* On shutdown the leader releases the Lease (empty holder) so a standby takes over at once instead of
  after ``lease_duration``.

Deadlines (stricter than client-go, which trusts its HTTP client's timeout): leadership is proven from
the *start* of the last round that renewed the Lease (a standby cannot take over before
``lease_duration`` after that). Every round of Lease calls runs under an ``asyncio`` timeout of the
renew deadline that is left (a candidate's round: the whole ``renew_deadline``), so an API that hangs or
answers slowly cannot hold the elector; a renewal answered after the deadline (the monotonic clock
jumped: a suspended process) proves nothing. The leader steps down the moment the deadline passes,
also while a call is in flight, before ``lease_duration`` can run out. One cancel stops :meth:`run`:
the release it then attempts is bounded by the same deadline.

Only the leader reports ready (the server wires ``on_started_leading`` / ``on_stopped_leading`` to the
gRPC health service). I/O goes through :class:`LeaseApi`; :class:`KubernetesLeaseApi` adapts
``kubernetes_asyncio``. Clocks are injected.

:func:`run_leader_election` campaigns for the pool's Lease over the in-cluster (or kubeconfig) API. The
identity is ``$POD_NAME`` (the Downward API) or the host name, plus a random suffix so a restarted
container never inherits its predecessor's term. Readiness (``readiness``, ``""`` and the ext_proc
service) is SERVING only while this replica leads; ``liveness`` is unaffected.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog

from epp.config.options import Options
from epp.kubernetes.client import kubernetes_client

__all__ = [
    "KubernetesLeaseApi",
    "LeaderElector",
    "LeadershipTarget",
    "LeaseApi",
    "LeaseConflict",
    "LeaseRecord",
    "campaign",
    "default_lease_name",
    "run_leader_election",
]

log = structlog.get_logger("epp.ha")


class LeaseConflict(Exception):
    """The Lease changed since it was read (HTTP 409) or was created concurrently."""


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str = ""
    lease_duration_s: int = 15
    acquire_time: dt.datetime | None = None
    renew_time: dt.datetime | None = None
    transitions: int = 0
    resource_version: str = ""


class LeaseApi(Protocol):
    async def get(self) -> LeaseRecord | None:
        """The current Lease, or None when it does not exist."""
        ...

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        """Create the Lease; raises LeaseConflict when it already exists."""
        ...

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        """Replace the Lease if ``record.resource_version`` is current; else LeaseConflict."""
        ...


def default_lease_name(pool_namespace: str, pool_name: str) -> str:
    """The Lease name for a pool's pickers (one election per pool)."""
    return f"epp-{pool_namespace}-{pool_name}.inference-extension.leader"[:253]


class LeaderElector:
    def __init__(
        self,
        api: LeaseApi,
        identity: str,
        *,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        if not (lease_duration_s > renew_deadline_s > retry_period_s > 0):
            raise ValueError("leader election needs lease_duration > renew_deadline > retry_period > 0")
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        self._api = api
        self.identity = identity
        self._lease_duration = lease_duration_s
        self._renew_deadline = renew_deadline_s
        self._retry = retry_period_s
        self._started = on_started_leading
        self._stopped = on_stopped_leading
        self._mono = monotonic
        self._wall = wall
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._proven_at = 0.0
        self.is_leader = False

    def _observe(self, record: LeaseRecord) -> None:
        old = self._observed
        same = old is not None and (old.holder, old.renew_time, old.resource_version) == (
            record.holder,
            record.renew_time,
            record.resource_version,
        )
        if not same:
            self._observed = record
            self._observed_at = self._mono()

    async def try_acquire_or_renew(self) -> bool:
        """One round of the election; True when we hold the Lease afterwards."""
        now = self._wall()
        mine = LeaseRecord(
            holder=self.identity,
            lease_duration_s=round(self._lease_duration),
            acquire_time=now,
            renew_time=now,
        )
        current = await self._api.get()
        if current is None:
            try:
                self._observe(await self._api.create(mine))
            except LeaseConflict:
                return False
            return True
        self._observe(current)
        held_by_other = current.holder not in ("", self.identity)
        if held_by_other and self._observed_at + current.lease_duration_s > self._mono():
            return False
        if current.holder == self.identity:
            mine = replace(mine, acquire_time=current.acquire_time, transitions=current.transitions)
        else:
            mine = replace(mine, transitions=current.transitions + 1)
        try:
            self._observe(await self._api.update(replace(mine, resource_version=current.resource_version)))
        except LeaseConflict:
            return False
        return True

    def _set_leader(self, leader: bool) -> None:
        if leader == self.is_leader:
            return
        self.is_leader = leader
        log.info("leader election", identity=self.identity, leader=leader)
        (self._started if leader else self._stopped)()

    async def _attempt(self, budget: float) -> bool:
        """One round under a ``budget``-second timeout; True only when it won within the budget.

        On success the proof of leadership restarts at the round's start."""
        if budget <= 0:
            return False
        start = self._mono()
        try:
            async with asyncio.timeout(budget):
                won = await self.try_acquire_or_renew()
        except LeaseConflict:
            return False
        except TimeoutError:
            log.warning("leader election round timed out", identity=self.identity, budget_s=round(budget, 3))
            return False
        except Exception as exc:  # API unreachable, bad answers: keep trying, never crash the server
            log.warning("leader election round failed", error=str(exc))
            return False
        if won and self._mono() - start >= budget:  # the clock jumped during the round (suspended)
            log.warning("leader election round answered past its deadline", identity=self.identity)
            return False
        if won:
            self._proven_at = start
        return won

    def _left(self) -> float:
        """Seconds left before the renew deadline (measured from the start of the last won round)."""
        return self._proven_at + self._renew_deadline - self._mono()

    async def run(self) -> None:
        """Campaign and lead until cancelled; releases the Lease when cancelled while leading."""
        try:
            while True:
                # Candidate: retry until acquired.
                while not await self._attempt(self._renew_deadline):
                    await asyncio.sleep(self._retry)
                self._set_leader(True)
                # Leader: renew; step down when the renew deadline passes without a renewal.
                while True:
                    await asyncio.sleep(max(0.0, min(self._retry, self._left())))
                    if await self._attempt(self._left()):
                        continue
                    if self._left() <= 0 or (
                        self._observed is not None and self._observed.holder not in ("", self.identity)
                    ):
                        self._set_leader(False)
                        break
        finally:
            if self.is_leader:
                # stop leading before the release is written: once the Lease is free another replica
                # may lead, and this one must not still be acting as leader then
                self._set_leader(False)
                with contextlib.suppress(BaseException):
                    await asyncio.shield(self._bounded_release(self._left()))

    async def _bounded_release(self, budget: float) -> None:
        if budget > 0:
            async with asyncio.timeout(budget):
                await self._release()

    async def _release(self) -> None:
        current = await self._api.get()
        if current is None or current.holder != self.identity:
            return
        now = self._wall()
        await self._api.update(replace(current, holder="", renew_time=now, lease_duration_s=1))


def _parse_time(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _fmt_time(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubernetesLeaseApi:
    """:class:`LeaseApi` over ``kubernetes_asyncio`` (coordination.k8s.io/v1 Leases)."""

    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        from kubernetes_asyncio import client

        self._api = client.CoordinationV1Api(api_client)
        self._ns = namespace
        self._name = name

    @staticmethod
    def _record(obj: dict[str, Any]) -> LeaseRecord:
        spec = obj.get("spec") or {}
        return LeaseRecord(
            holder=spec.get("holderIdentity") or "",
            lease_duration_s=int(spec.get("leaseDurationSeconds") or 15),
            acquire_time=_parse_time(spec.get("acquireTime")),
            renew_time=_parse_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=(obj.get("metadata") or {}).get("resourceVersion", ""),
        )

    def _body(self, record: LeaseRecord) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self._name, "namespace": self._ns}
        if record.resource_version:
            meta["resourceVersion"] = record.resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": record.holder,
                "leaseDurationSeconds": record.lease_duration_s,
                "acquireTime": _fmt_time(record.acquire_time),
                "renewTime": _fmt_time(record.renew_time),
                "leaseTransitions": record.transitions,
            },
        }

    async def _call(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        import json

        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            resp = await fn(*args, _preload_content=False)
            status, body = resp.status, await resp.read()
            resp.release()
        except ApiException as exc:  # raised for some statuses even without preloading
            status, body = exc.status, (exc.body or b"")
        if status == 404:
            return None
        if status == 409:
            raise LeaseConflict(
                body[:200].decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
            )
        if not 200 <= status < 300:
            raise ApiException(status=status, reason=f"lease API answered {status}")
        data: dict[str, Any] = json.loads(body)
        return data

    async def get(self) -> LeaseRecord | None:
        obj = await self._call(self._api.read_namespaced_lease, self._name, self._ns)
        return None if obj is None else self._record(obj)

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        obj = await self._call(self._api.create_namespaced_lease, self._ns, self._body(record))
        if obj is None:
            raise LeaseConflict("namespace not found while creating the lease")
        return self._record(obj)

    async def update(self, record: LeaseRecord) -> LeaseRecord:
        obj = await self._call(self._api.replace_namespaced_lease, self._name, self._ns, self._body(record))
        if obj is None:
            raise LeaseConflict("lease vanished while updating it")
        return self._record(obj)


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
    name = default_lease_name(options.pool_namespace, options.pool_name or "standalone")
    async with await kubernetes_client() as api_client:
        api = KubernetesLeaseApi(api_client, options.pool_namespace, name)
        identity = _identity()
        log.info("leader election started", lease=name, namespace=options.pool_namespace, identity=identity)
        await campaign(api, identity, target)
