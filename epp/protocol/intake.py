"""Request intake (pure): what the session schedules, from the proxy's request headers and body.

The :class:`~epp.protocol.session.Session` owns the protocol (states, messages, replies); this module
owns what the request *is*:

* :func:`read_body`: parse the complete body with ``SessionConfig.parser`` and decide the model it is
  rewritten to before scheduling: an InferenceModelRewrite rule (``SessionConfig.model_rewrite``) wins
  over the model-rewrite header (``x-llm-d-model-name-rewrite`` / ``x-gateway-model-name-rewrite``);
  the body is rewritten only when its API carries the model (else the rule's target is dropped).
* :func:`assemble`: the :class:`~scheduler.types.LLMRequest` (priority from the objective header,
  fairness id from the fairness header, else the ``agent-identity`` reader, else
  :data:`scheduler.types.DEFAULT_FAIRNESS_ID`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from epp.protocol.config import SessionConfig
from epp.request.build import (
    FAIRNESS_HEADERS,
    MODEL_REWRITE_HEADERS,
    OBJECTIVE_HEADERS,
    build_request,
    header_value,
)
from epp.request.chain import path_of
from epp.request.parser import ParsedBody
from scheduler.types import DEFAULT_FAIRNESS_ID, LLMRequest

__all__ = ["ReadBody", "assemble", "read_body"]


class ReadBody(NamedTuple):
    """A parsed request body. ``target_model``: the model a rewrite rule chose (None: no rule applied);
    ``changed_body``: the body with the model rewritten (None: unchanged); ``rewrite``: (new model,
    original model) when it was, to rewrite the model name back in the response."""

    parsed: ParsedBody
    target_model: str | None
    changed_body: bytes | None
    rewrite: tuple[str, str] | None


def read_body(config: SessionConfig, headers: Mapping[str, str], body: bytes, request_id: str) -> ReadBody:
    """Parse ``body`` and apply the model rewrite (module docstring). Raises RequestError."""
    parsed = config.parser.parse(path_of(headers), body)
    target = header_value(headers, MODEL_REWRITE_HEADERS)
    by_rule = None
    rewriter = config.model_rewrite
    if rewriter is not None and parsed.model:
        by_rule = rewriter(parsed.model, request_id)
        target = by_rule or target
    if target and parsed.model and target != parsed.model:
        new_body = config.parser.rewrite_model(parsed, body, target)
        if new_body is not body:
            return ReadBody(parsed, by_rule, new_body, (target, parsed.model))
        by_rule = None  # this API's body does not carry the model: nothing was rewritten
    return ReadBody(parsed, by_rule, None, None)


def assemble(
    config: SessionConfig,
    headers: Mapping[str, str],
    parsed: ParsedBody,
    request_id: str,
    body_size: int,
    target_model: str | None = None,
) -> LLMRequest:
    """The request to schedule (pure but for the configured readers)."""
    priority = config.priority_of(header_value(headers, OBJECTIVE_HEADERS))
    fairness_id = header_value(headers, FAIRNESS_HEADERS)
    if not fairness_id:
        reader = config.agent_identity
        fairness_id = (reader(headers) if reader is not None else "") or DEFAULT_FAIRNESS_ID
    return build_request(
        target_model=target_model,
        request_id=request_id,
        headers=headers,
        parsed=parsed,
        priority=priority,
        fairness_id=fairness_id,
        body_size=body_size,
    )
