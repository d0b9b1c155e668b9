"""Request log lines by verbosity (prompt text only at 5), structlog JSON rendering, decision ring."""

from __future__ import annotations

import io
import logging
from typing import Any

import orjson
import pytest
import structlog
from structlog.testing import capture_logs

from epp.server.decisions import DecisionLog
from epp.server.logs import DirectLogger, configure_logging, level_for
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


def _configured(fmt: str, **kwargs: Any) -> tuple[io.StringIO, Any]:
    out = io.StringIO()
    configure_logging(2, fmt, out, **kwargs)
    return out, structlog.get_config()


@pytest.mark.parametrize(
    ("fmt", "kwargs"),
    [
        ("json", {}),
        ("json", {"time_encoding": "nano"}),
        ("json", {"stacktrace_level": "info"}),
        ("console", {}),
    ],
)
def test_direct_request_line_is_structlogs_line(fmt: str, kwargs: dict[str, Any]) -> None:
    """The request line written through direct_logger is byte-for-byte structlog's (timestamps aside)."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        out, _ = _configured(fmt, **kwargs)
        log = RequestLog(2)
        traced = kwargs.get("stacktrace_level") == "info"
        assert isinstance(log._log, DirectLogger) is not traced  # the direct path would add a stack frame
        log.stream_ended(REQUEST, RESULT, None, 0.0001, DONE, 0.02)
        RequestLog(2, logger=structlog.get_logger("epp.request")).stream_ended(
            REQUEST, RESULT, None, 0.0001, DONE, 0.02
        )
        direct, chained = out.getvalue().splitlines()
        if fmt == "json":  # same fields in the same order, timestamps (and stack traces' call sites) aside
            lines = [orjson.loads(line) for line in (direct, chained)]
            for line in lines:
                assert line.pop("timestamp") and ("stacktrace" in line) is traced
                line.pop("stacktrace", None)
            assert list(lines[0].items()) == list(lines[1].items())
        else:
            assert direct.split(" ", 1)[1] == chained.split(" ", 1)[1]
        # capture_logs (which edits the configured chain in place) sees the line: the direct path steps aside
        with capture_logs() as captured:
            log.stream_ended(REQUEST, RESULT, None, 0.0001, DONE, 0.02)
        assert [e["event"] for e in captured] == ["request"] and captured[0]["request_id"] == "r1"
        # a later configuration (to another stream) wins: the old direct logger hands over to structlog
        # (structlog's own proxy, used when traced, stays with the logger it cached on first use)
        other, _ = _configured("json")
        log.stream_ended(REQUEST, RESULT, None, 0.0001, DONE, 0.02)
        if not traced:
            assert len(out.getvalue().splitlines()) == 2
            assert orjson.loads(other.getvalue())["request_id"] == "r1"
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)


def test_direct_logger_before_configuration_is_structlogs() -> None:
    import epp.server.logs as logs

    saved = logs._direct
    logs._direct = None
    try:
        assert not isinstance(logs.direct_logger("epp.request"), DirectLogger)
    finally:
        logs._direct = saved


async def test_direct_lines_of_one_loop_iteration_are_written_together() -> None:
    """In a running loop the lines wait for the end of the iteration, then go out in order, each line's
    bytes unchanged; past the budget they go at once; flush() (and so exit) writes what is held."""
    import asyncio

    import epp.server.logs as logs

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        out, _ = _configured("json")
        log = RequestLog(2)
        for i in range(3):
            log.stream_ended(LLMRequest(f"r{i}", "m", "m"), RESULT, None, 0.0001, DONE, 0.02)
        assert out.getvalue() == ""  # held until this iteration ends
        await asyncio.sleep(0)
        lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
        assert [line["request_id"] for line in lines] == ["r0", "r1", "r2"]
        assert out.getvalue().endswith("}\n") and "\n\n" not in out.getvalue()
        direct = log._log
        assert isinstance(direct, DirectLogger)
        for i in range(logs.MAX_PENDING_LINES):
            log.stream_ended(LLMRequest(f"b{i}", "m", "m"), RESULT, None, 0.0001, DONE, 0.02)
        assert len(out.getvalue().splitlines()) == 3 + logs.MAX_PENDING_LINES  # the budget wrote them
        log.stream_ended(REQUEST, RESULT, None, 0.0001, DONE, 0.02)
        assert direct in logs._holding
        logs._flush_held()  # what exit runs
        assert orjson.loads(out.getvalue().splitlines()[-1])["request_id"] == "r1"
        await asyncio.sleep(0)  # the iteration's own flush then finds nothing to write
        assert len(out.getvalue().splitlines()) == 4 + logs.MAX_PENDING_LINES
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
