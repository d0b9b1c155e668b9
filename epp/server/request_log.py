"""One log line per request (verbosity >= 2), written when its ext_proc stream ends.

Fields: ``request_id``, ``model``, ``target_model``, ``priority``, ``endpoints`` (primary first),
``profile``, ``schedule_ms``, ``duration_ms``, ``outcome``, ``status``, ``error`` (the error type of an
HTTP error answered by the picker), token usage, and ``trace_id`` (from a W3C ``traceparent`` header)
when tracing is on. Verbosity >= 4 adds ``decision`` (filters, per-plugin scores, weights, totals).
Prompt text is added only at verbosity 5. Written through :func:`epp.server.logs.direct_logger` (the
configured chain without structlog's per-call machinery; the same bytes).
"""

from __future__ import annotations

from typing import Any

from epp.server.logs import direct_logger
from scheduler.types import Completion, LLMRequest, SchedulingResult

__all__ = ["RequestLog"]


class RequestLog:
    __slots__ = ("_log", "_tracing", "_verbosity")

    def __init__(self, verbosity: int, *, tracing: bool = True, logger: Any = None) -> None:
        self._verbosity = verbosity
        self._tracing = tracing
        self._log = logger if logger is not None else direct_logger("epp.request")

    def stream_ended(
        self,
        request: LLMRequest | None,
        result: SchedulingResult | None,
        error: str | None,
        schedule_seconds: float,
        completion: Completion | None,
        seconds: float,
    ) -> None:
        if request is None and error is None:
            return  # the proxy opened and closed a stream without a request: nothing to tell
        fields: dict[str, Any] = {"duration_ms": round(seconds * 1000, 3)}
        if request is not None:
            fields.update(
                request_id=request.request_id,
                model=request.model,
                target_model=request.target_model,
                priority=request.priority,
            )
            if self._tracing:
                traceparent = request.headers.get("traceparent", "")
                if traceparent.count("-") == 3:
                    fields["trace_id"] = traceparent.split("-")[1]
            if self._verbosity >= 5:
                fields["prompt"] = request.prompt_text
        if result is not None:
            fields.update(
                endpoints=list(result.addresses),
                profile=result.primary_profile,
                schedule_ms=round(schedule_seconds * 1000, 4),
            )
            if self._verbosity >= 4 and result.decision is not None:
                fields["decision"] = result.decision.to_dict()
        if completion is not None:
            usage = completion.usage
            fields.update(
                outcome=completion.outcome.value,
                status=completion.status_code,
                served=completion.served_endpoint,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cached_tokens=usage.cached_tokens,
            )
        if error is not None:
            fields["error"] = error
        self._log.info("request", **fields)
