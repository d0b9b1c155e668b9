"""Assemble the :class:`~scheduler.types.LLMRequest` from request headers and a parsed body.

``target_model`` is the one given (an InferenceModelRewrite decision), else the model-rewrite header
when present and non-empty, else the body's model.
Control headers have llm-d-router's names with GIE's as deprecated aliases (the first present wins, as
upstream's ``GetLowerCaseHeaderValue``): ``x-llm-d-model-name-rewrite`` / ``x-gateway-model-name-rewrite``,
``x-llm-d-inference-objective`` / ``x-gateway-inference-objective``, ``x-llm-d-inference-fairness-id`` /
``x-gateway-inference-fairness-id``. ``token_estimate = len(prompt_text) // 4``. Priority and fairness
id are resolved by the caller (admission) and passed in.
"""

from __future__ import annotations

from collections.abc import Mapping

from epp.request.parser import ParsedBody
from scheduler.types import LLMRequest

__all__ = [
    "FAIRNESS_HEADER",
    "FAIRNESS_HEADERS",
    "MODEL_REWRITE_HEADER",
    "MODEL_REWRITE_HEADERS",
    "OBJECTIVE_HEADER",
    "OBJECTIVE_HEADERS",
    "build_request",
    "header_value",
]

# The control headers' names, defined once here (epp.protocol.headers re-exports them); each tuple
# is in precedence order: llm-d-router's name, then GIE's (a deprecated alias there).
MODEL_REWRITE_HEADER = "x-gateway-model-name-rewrite"
OBJECTIVE_HEADER = "x-gateway-inference-objective"
FAIRNESS_HEADER = "x-gateway-inference-fairness-id"
MODEL_REWRITE_HEADERS = ("x-llm-d-model-name-rewrite", MODEL_REWRITE_HEADER)
OBJECTIVE_HEADERS = ("x-llm-d-inference-objective", OBJECTIVE_HEADER)
FAIRNESS_HEADERS = ("x-llm-d-inference-fairness-id", FAIRNESS_HEADER)


def header_value(headers: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The value of the first of ``names`` present in ``headers`` (current name, then aliases)."""
    for name in names:
        value = headers.get(name)
        if value is not None:
            return value
    return None


def build_request(
    *,
    request_id: str,
    headers: Mapping[str, str],
    parsed: ParsedBody,
    priority: int,
    fairness_id: str,
    body_size: int,
    target_model: str | None = None,
) -> LLMRequest:
    """The request the scheduler decides on (pure)."""
    target = target_model or header_value(headers, MODEL_REWRITE_HEADERS) or parsed.model
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
