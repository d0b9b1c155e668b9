"""Lifecycle hooks that feed a plugin's :class:`~scheduler.plugins.shared.inflight.InflightTracker`.

Shared by every plugin that keeps its own in-flight accounting (``active-request-scorer``,
``token-load-scorer``, ``concurrency-detector``, ``prefix-cache-affinity-filter``). A plugin mixes
in :class:`InflightHooks`, sets ``self.tracker`` in its constructor and states only what differs:

* ``count_every_profile``: count a dispatch against the first target of every routed profile (the
  decode and the prefill endpoint in P/D) instead of the primary endpoint only;
* ``dispatch_tokens(request)``: the tokens a dispatch holds (default 0: the plugin counts requests).

The hooks:

* ``on_dispatched`` counts the request, once per request id;
* ``on_response_headers`` moves the primary count to the endpoint that actually served when the
  proxy reports a fallback served (response header :data:`SERVED_ENDPOINT_HEADER`);
* ``on_completed`` uncounts it, idempotently (a completion reported twice counts once);
* ``on_endpoints_removed`` drops the counters of endpoints that left the pool.

Each is O(1) in the number of in-flight requests and runs on the caller's thread (not thread-safe).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from scheduler.headers import SERVED_ENDPOINT_HEADER
from scheduler.plugins.shared.inflight import InflightTracker, dispatch_targets
from scheduler.types import Completion, LLMRequest, SchedulingResult

__all__ = ["SERVED_ENDPOINT_HEADER", "InflightHooks"]


class InflightHooks:
    """Mixin: the dispatch / response-headers / completion / removal hooks over ``self.tracker``."""

    tracker: InflightTracker
    count_every_profile: ClassVar[bool] = False
    tracking: bool = True
    """False when the plugin reads an inflight-load-producer instead (the hooks then do nothing)."""

    def dispatch_tokens(self, request: LLMRequest) -> int:
        """Tokens counted for ``request`` while it is in flight (0 unless the plugin counts tokens)."""
        return 0

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        if not self.tracking:
            return
        targets = dispatch_targets(result, every_profile=self.count_every_profile)
        self.tracker.dispatch(request.request_id, targets, self.dispatch_tokens(request))

    def on_response_headers(
        self, request: LLMRequest, result: SchedulingResult, status: int, headers: Mapping[str, str]
    ) -> None:
        served = headers.get(SERVED_ENDPOINT_HEADER)
        if served and self.tracking:
            self.tracker.move(request.request_id, served)

    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        self.tracker.complete(request.request_id)

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        self.tracker.forget(addresses)
