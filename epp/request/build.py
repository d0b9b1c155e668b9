"""Assemble the :class:`~scheduler.types.LLMRequest` from request headers and a parsed body.

``target_model`` is the ``x-gateway-model-name-rewrite`` header when present and non-empty, else the
body's model. ``token_estimate = len(prompt_text) // 4``. Priority and fairness id are resolved by the
caller (admission) and passed in.
"""

from __future__ import annotations

from collections.abc import Mapping

from epp.request.parser import ParsedBody
from scheduler.types import LLMRequest

__all__ = ["MODEL_REWRITE_HEADER", "build_request"]

MODEL_REWRITE_HEADER = "x-gateway-model-name-rewrite"


def build_request(
    *,
    request_id: str,
    headers: Mapping[str, str],
    parsed: ParsedBody,
    priority: int,
    fairness_id: str,
    body_size: int,
) -> LLMRequest:
    """The request the scheduler decides on (pure)."""
    target = headers.get(MODEL_REWRITE_HEADER) or parsed.model
    return LLMRequest(
        request_id=request_id,
        model=parsed.model,
        target_model=target,
        prompt_text=parsed.prompt_text,
        messages=parsed.messages,
        headers=headers,
        priority=priority,
        fairness_id=fairness_id,
        stream=parsed.stream,
        token_estimate=len(parsed.prompt_text) // 4,
        cache_salt=parsed.cache_salt,
        api=parsed.api,
        body_size=body_size,
    )
