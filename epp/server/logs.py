"""Logging set-up: structlog for our own events, the standard library routed through the same renderer.

Verbosity follows GIE's ``-v`` levels: 0 warnings and errors only; 1 adds startup, shutdown and
state changes; 2 (the default, llm-d-router's DEFAULT) one line per request (``request`` event: request
id, model, target model, chosen endpoints, profile, scheduling time, outcome); 3 verbose; 4 adds
per-plugin scores (the decision record) to the request line; 5 trace, the only level that may log prompt text.

``--log-format json`` (default, production) renders one JSON object per line; ``console`` renders
key=value lines for people. Output goes to ``stream`` (stderr by default).

The controller-runtime zap flags map onto this: ``--zap-time-encoding`` picks the ``timestamp`` format
(``epoch`` float seconds, ``millis`` float milliseconds, ``nano`` integer nanoseconds, ``iso8601``
``2006-01-02T15:04:05.000Z``, ``rfc3339`` whole seconds, ``rfc3339nano``; default ours: ISO 8601 UTC with
microseconds); ``--zap-stacktrace-level`` (``debug``, ``info``, ``error``, ``panic``; default ``error``,
``warn`` in development mode) adds a ``stacktrace`` field (the logging call's stack) to every line at or
above it that carries no exception already; ``--zap-devel`` is development mode (the CLI also makes it
select the console format).
"""

from __future__ import annotations

import datetime
import logging
import sys
import time
import traceback
from collections.abc import MutableMapping
from typing import Any, TextIO

import orjson
import structlog

__all__ = ["STACKTRACE_LEVELS", "TIME_ENCODINGS", "configure_logging", "level_for"]

TIME_ENCODINGS = ("epoch", "millis", "nano", "iso8601", "rfc3339", "rfc3339nano")
STACKTRACE_LEVELS = ("debug", "info", "error", "panic")
_LEVEL_RANK = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50, "panic": 50}


def level_for(verbosity: int) -> int:
    """The stdlib level that ``-v verbosity`` enables."""
    if verbosity <= 0:
        return logging.WARNING
    if verbosity == 1 or verbosity == 2:
        return logging.INFO
    return logging.DEBUG


def _orjson_dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def _time_stamper(encoding: str | None) -> Any:
    """A processor writing ``timestamp`` in the ``--zap-time-encoding`` format."""
    if encoding is None:
        return structlog.processors.TimeStamper(fmt="iso", utc=True)

    def stamp(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        ns = time.time_ns()
        if encoding == "epoch":
            event["timestamp"] = ns / 1e9
        elif encoding == "millis":
            event["timestamp"] = ns / 1e6
        elif encoding == "nano":
            event["timestamp"] = ns
        else:
            moment = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.UTC)
            text = moment.strftime("%Y-%m-%dT%H:%M:%S")
            if encoding == "iso8601":
                text += f".{ns // 1_000_000 % 1000:03d}"
            elif encoding == "rfc3339nano":
                text += f".{ns % 1_000_000_000:09d}".rstrip("0").rstrip(".")
            event["timestamp"] = text + "Z"
        return event

    return stamp


def _stack_adder(threshold: str) -> Any:
    """A processor adding ``stacktrace`` to events at or above ``threshold`` without exc_info."""
    rank = _LEVEL_RANK[threshold]

    def add(_: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        level = str(event.get("level", method)).lower()
        if _LEVEL_RANK.get(level, 0) >= rank and "exc_info" not in event and "exception" not in event:
            frames = [f for f in traceback.extract_stack() if "/structlog/" not in f.filename]
            event["stacktrace"] = "".join(traceback.format_list(frames[:-1]))
        return event

    return add


def configure_logging(
    verbosity: int,
    fmt: str,
    stream: TextIO | None = None,
    *,
    time_encoding: str | None = None,
    stacktrace_level: str | None = None,
    development: bool = False,
) -> None:
    """Configure structlog and the root stdlib logger (idempotent; the last call wins)."""
    level = level_for(verbosity)
    out = stream if stream is not None else sys.stderr
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _time_stamper(time_encoding),
        _stack_adder(stacktrace_level or ("warn" if development else "error")),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # gRPC's and aiohttp's access chatter, and httpx's line per request (the token-producer's /render
    # calls: one per scheduled request), only at trace verbosity
    for noisy in ("aiohttp.access", "grpc._cython.cygrpc", "httpx"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbosity >= 5 else logging.WARNING)
