"""Request log lines by verbosity (prompt text only at 5), structlog JSON rendering, decision ring."""

from __future__ import annotations

import io
import logging
from typing import Any

import orjson
import structlog

from epp.server.decisions import DecisionLog
from epp.server.logs import configure_logging, level_for
from epp.server.request_log import RequestLog
from scheduler.types import (
    Completion,
    DecisionRecord,
    Endpoint,
    LLMRequest,
    Outcome,
    ProfileDecision,
    SchedulingResult,
    Usage,
)

REQUEST = LLMRequest(
    "r1", "m", "m-lora", prompt_text="secret prompt",
    headers={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
)  # fmt: skip
DECISION = DecisionRecord(
    "r1",
    (
        ProfileDecision(
            "default", (), ("a:1",), {"queue-scorer": (1.0,)}, {"queue-scorer": 2.0}, (2.0,), "p", ("a:1",)
        ),
    ),
    "default",
)
RESULT = SchedulingResult("default", (Endpoint("a:1"),), {}, decision=DECISION)
DONE = Completion(Outcome.OK, 200, usage=Usage(5, 3, 8, 2))


class Capture:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


def _line(verbosity: int) -> dict[str, Any]:
    cap = Capture()
    RequestLog(verbosity, logger=cap).stream_ended(REQUEST, RESULT, None, 0.0001, DONE, 0.02)
    [(event, fields)] = cap.events
    assert event == "request"
    return fields


def test_request_line_fields_by_verbosity() -> None:
    v2 = _line(2)
    assert v2["request_id"] == "r1" and v2["model"] == "m" and v2["target_model"] == "m-lora"
    assert v2["endpoints"] == ["a:1"] and v2["profile"] == "default" and v2["outcome"] == "ok"
    assert v2["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert v2["completion_tokens"] == 3 and v2["cached_tokens"] == 2
    assert "decision" not in v2 and "prompt" not in v2
    v4 = _line(4)
    assert v4["decision"]["profiles"][0]["scores"] == {"queue-scorer": {"a:1": 1.0}}
    assert "prompt" not in v4
    assert _line(5)["prompt"] == "secret prompt"


def test_rejected_request_and_empty_stream() -> None:
    cap = Capture()
    log = RequestLog(2, logger=cap)
    log.stream_ended(REQUEST, None, "service_unavailable", 0.0, None, 0.001)
    log.stream_ended(None, None, None, 0.0, None, 0.001)
    assert len(cap.events) == 1
    assert cap.events[0][1]["error"] == "service_unavailable" and "endpoints" not in cap.events[0][1]


def test_json_rendering_routes_stdlib_logs_too() -> None:
    out = io.StringIO()
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(2, "json", out)
    try:
        structlog.get_logger("t").info("hello", n=1)
        logging.getLogger("datalayer.x").warning("from stdlib %s", "logging")
        logging.getLogger("httpx").info("HTTP Request: POST /v1/completions/render")  # one per request: off
        lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
        assert lines[0]["event"] == "hello" and lines[0]["n"] == 1 and lines[0]["level"] == "info"
        assert lines[1]["event"] == "from stdlib logging" and lines[1]["level"] == "warning"
        assert len(lines) == 2
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
    assert level_for(0) > level_for(1) > level_for(3)


def test_decision_ring_is_bounded_newest_first() -> None:
    ring = DecisionLog(3, clock=lambda: 7.0)
    for i in range(5):
        ring.add(LLMRequest(f"r{i}", "m", "m"), RESULT, 0.001)
    got = ring.last(10)
    assert [d["request_id"] for d in got] == ["r4", "r3", "r2"]
    assert got[0]["decision"]["primary_profile"] == "default" and got[0]["time"] == 7.0
    assert ring.last(0) == []
    assert got[0]["model"] == "m" and got[0]["priority"] == 0
    # the request (prompt, headers) is not kept alive by the ring
    assert not any(isinstance(field, LLMRequest) for entry in ring._ring for field in entry)
