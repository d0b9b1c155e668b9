"""Start-up readiness: has any endpoint answered yet? (``--ready-requires-endpoint``)

A picker whose endpoints never answered can only fail every request, so by default in the standalone
modes the health service turns SERVING only once at least one endpoint has answered a scrape (its
metrics have been read once). :func:`wait_for_an_answer` returns at that moment; until then, each time
every known endpoint has been tried and none answered, it logs one warning naming each endpoint with its
error (again only when that set changes). With ``--ready-requires-endpoint=false`` (the default in the
Kubernetes modes, as GIE) the picker is ready once discovery is synced and the same watcher only logs.

Only start-up is gated: once ready, the picker stays ready while endpoints come and go (the scheduler
answers 503 when none is ready), as GIE does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from datalayer.records import EndpointRecord, Health

__all__ = ["answered", "unanswered", "wait_for_an_answer"]

Snapshot = Callable[[], Sequence[EndpointRecord]]


def answered(snapshot: Sequence[EndpointRecord]) -> int:
    """How many endpoints have answered a scrape at least once."""
    return sum(1 for r in snapshot if r.metrics.updated_at > 0.0)


def unanswered(snapshot: Sequence[EndpointRecord]) -> list[dict[str, str]] | None:
    """Every endpoint as ``{endpoint, address, error}`` when all have been tried and none answered;
    None while some endpoint has not been tried yet or one has answered."""
    if answered(snapshot) or any(r.health is Health.UNKNOWN for r in snapshot):
        return None
    return [{"endpoint": r.name, "address": r.address, "error": r.last_error or ""} for r in snapshot]


async def wait_for_an_answer(
    snapshot: Snapshot,
    log: Any,
    message: str,
    *,
    interval: float = 0.05,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> int:
    """Return the number of endpoints that answered, once it is at least one; meanwhile log
    ``message`` as a warning naming every unreachable endpoint whenever that set changes."""
    logged: list[str] | None = None
    while True:
        records = snapshot()
        count = answered(records)
        if count:
            return count
        failing = unanswered(records)
        if failing is not None and [f["address"] for f in failing] != logged:
            logged = [f["address"] for f in failing]
            log.warning(message, endpoints=len(records), unreachable=failing)
        await sleep(interval)
