"""InferenceModelRewrite in the ext_proc Session: the body's model rewritten before scheduling, the
client's name written back into the response (the same path as the ``x-gateway-model-name-rewrite``
header), and GIE's precedence of a rule over that header."""

from __future__ import annotations

import random

import orjson
from extproc_messages import (
    request_body,
    request_headers,
    response_body,
    response_headers,
    result,
    streamed_chunks,
)

from epp.admission.rewrites import ModelRewrite, ModelRewriter, RewriteRule, RewriteStore, RewriteTarget
from epp.protocol import Schedule, Send, Session, SessionConfig
from epp.request import PassthroughParser

ALIAS = "food-review"
BODY = orjson.dumps({"model": ALIAS, "messages": [{"role": "user", "content": "hi"}]})


def rewriter(*targets: str, seen: list[tuple[str, str]] | None = None) -> ModelRewriter:
    rule = RewriteRule((ALIAS,), tuple(RewriteTarget(t) for t in targets))
    store = RewriteStore([ModelRewrite("canary", (rule,))])
    out = seen if seen is not None else []
    return ModelRewriter(store, random.Random(0), lambda d: out.append((d.model, d.target)))


def schedule(
    config: SessionConfig, body: bytes = BODY, headers: dict[str, str] | None = None
) -> tuple[Session, Schedule]:
    s = Session(config)
    s.receive(request_headers({"x-request-id": "rid-1", **(headers or {})}, path="/v1/chat/completions"))
    (action,) = s.receive(request_body(body))
    assert isinstance(action, Schedule)
    return s, action


def forwarded_body(s: Session) -> bytes:
    out = [a.response for a in s.scheduled(result("10.0.0.1:8000")) if isinstance(a, Send)]
    return b"".join(c for c, _ in streamed_chunks(out[1:], "request_body"))


def test_rule_rewrites_the_body_and_the_response_back() -> None:
    seen: list[tuple[str, str]] = []
    s, sched = schedule(SessionConfig(model_rewrite=rewriter("food-review-v2", seen=seen)))
    assert sched.request.model == ALIAS and sched.request.target_model == "food-review-v2"
    assert orjson.loads(forwarded_body(s))["model"] == "food-review-v2"
    assert seen == [(ALIAS, "food-review-v2")]
    s.receive(response_headers(200, "text/event-stream"))
    out = s.receive(response_body(b'data: {"model":"food-review-v2","choices":[]}\n\n'))
    chunk = streamed_chunks([a.response for a in out if isinstance(a, Send)], "response_body")[0][0]
    assert chunk == b'data: {"model":"food-review","choices":[]}\n\n'


def test_rule_wins_over_the_rewrite_header() -> None:
    """GIE: the header sets TargetModelName first; a matching rule then overrides it."""
    config = SessionConfig(model_rewrite=rewriter("by-rule"))
    s, sched = schedule(config, headers={"x-gateway-model-name-rewrite": "by-header"})
    assert sched.request.target_model == "by-rule"
    assert orjson.loads(forwarded_body(s))["model"] == "by-rule"


def test_no_matching_rule_keeps_the_header_and_the_body() -> None:
    config = SessionConfig(model_rewrite=rewriter("unused"))
    other = BODY.replace(b'"food-review"', b'"other"')
    _, sched = schedule(config, other)
    assert sched.request.target_model == "other"
    _, sched = schedule(config, other, {"x-gateway-model-name-rewrite": "by-header"})
    assert sched.request.target_model == "by-header"


def test_target_equal_to_the_model_changes_nothing() -> None:
    s, sched = schedule(SessionConfig(model_rewrite=rewriter(ALIAS)))
    assert sched.request.target_model == ALIAS
    assert forwarded_body(s) == BODY


def test_a_body_without_a_model_field_is_not_matched() -> None:
    """Parsers that do not read a model (passthrough) give no name to match: no decision."""
    seen: list[tuple[str, str]] = []
    config = SessionConfig(parser=PassthroughParser(), model_rewrite=rewriter("x", seen=seen))
    _, sched = schedule(config)
    assert sched.request.target_model == "" and seen == []
