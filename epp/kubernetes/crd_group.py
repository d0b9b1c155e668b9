"""Which API group serves InferenceObjective / InferenceModelRewrite, as llm-d-router decides it.

llm-d-router's objects are ``llm-d.ai/v1alpha2``; GIE's (deprecated there) are
``inference.networking.x-k8s.io/v1alpha2``. At start llm-d-router asks the API server which of the two
serves the kind, prefers ``llm-d.ai`` (logging that legacy objects are ignored when both CRDs are
installed) and starts no reconciler for a kind that neither serves. :func:`served_group` does the same
with one ``list`` of at most one object per group: 404 means the resource is not served (the CRD is not
installed); any other answer, 403 included, counts as served (the watch then reports its own errors).
A probe that gets no answer at all (connection refused, nothing within 10 s) is retried with backoff
(0.5 s doubling to 30 s), so the choice is made on the API server's word.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

__all__ = ["GROUPS", "LEGACY_GROUP", "LLMD_GROUP", "VERSION", "served_group"]

log = structlog.get_logger("epp.crd")

LLMD_GROUP = "llm-d.ai"
LEGACY_GROUP = "inference.networking.x-k8s.io"
GROUPS = (LLMD_GROUP, LEGACY_GROUP)  # in order of preference
VERSION = "v1alpha2"


async def _served(api_client: Any, group: str, namespace: str, plural: str, timeout: float) -> bool:
    from kubernetes_asyncio import client

    api = client.CustomObjectsApi(api_client)
    resp = await api.list_namespaced_custom_object(
        group, VERSION, namespace, plural, limit=1, _preload_content=False, _request_timeout=timeout
    )
    try:
        await resp.read()
        return bool(resp.status != 404)
    finally:
        resp.release()


async def served_group(
    api_client: Any,
    namespace: str,
    plural: str,
    kind: str,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    timeout: float = 10.0,
) -> str | None:
    """The group to watch ``plural`` in: ``llm-d.ai`` when it is served, else the legacy group, else
    None (neither serves it). ``timeout``: seconds one probe may take before it counts as no answer."""
    backoff = 0.5
    while True:
        try:
            found = [g for g in GROUPS if await _served(api_client, g, namespace, plural, timeout)]
            break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug(f"{kind} discovery failed; retrying", error=f"{type(exc).__name__}: {exc}")
            await sleep(backoff)
            backoff = min(backoff * 2, 30.0)
    if not found:
        return None
    if len(found) == 2:
        log.warning(
            f"both {LEGACY_GROUP} and {LLMD_GROUP} {kind} CRDs are installed; "
            f"watching {LLMD_GROUP} and ignoring the legacy objects"
        )
    elif found[0] == LEGACY_GROUP:
        log.info(
            f"watching the deprecated {LEGACY_GROUP}/{VERSION} {kind}", replacement=f"{LLMD_GROUP}/{VERSION}"
        )
    return found[0]
