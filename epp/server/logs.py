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

import asyncio
import atexit
import datetime
import logging
import sys
import time
import traceback
import weakref
from collections.abc import MutableMapping
from typing import Any, TextIO

import orjson
import structlog

__all__ = [
    "MAX_PENDING_LINES",
    "STACKTRACE_LEVELS",
    "TIME_ENCODINGS",
    "DirectLogger",
    "configure_logging",
    "direct_logger",
    "level_for",
]

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


MAX_PENDING_LINES = 1024
"""Budget of lines a :class:`DirectLogger` holds before writing them (normally one loop iteration's)."""
_holding: weakref.WeakSet[DirectLogger] = weakref.WeakSet()  # loggers with lines to write at exit


class DirectLogger:
    """``info(event, **fields)`` for a hot path: runs the processor chain :func:`configure_logging` installed
    and writes the line with the same :class:`structlog.PrintLogger` (same stream, same write lock), so each
    line is byte-for-byte what ``structlog.get_logger().info`` writes, without structlog's per-call logger
    machinery (level dispatch, context copy, argument repacking).

    Inside a running event loop the lines of one loop iteration are written together when it ends (one
    ``write`` for all of them instead of one per line, the largest part of a line's cost; at most
    :data:`MAX_PENDING_LINES`, and whatever is held is written at exit), so a line may follow another
    logger's line of the same iteration. Outside a loop each line is written at once. Once structlog is
    configured otherwise (another :func:`configure_logging`, ``structlog.configure``,
    ``structlog.testing.capture_logs``) it hands every call to a new ``structlog.get_logger(name)``."""

    __slots__ = ("__weakref__", "_enabled", "_name", "_pending", "_printer", "_processors", "_renderer")

    def __init__(self, name: str, processors: list[Any], out: TextIO, level: int) -> None:
        self._processors = processors  # the very list structlog.configure was given (capture_logs edits it)
        self._renderer = processors[-1]
        self._printer = structlog.PrintLogger(out)
        self._enabled = level <= logging.INFO
        self._name = name
        self._pending: list[str] = []

    def info(self, event: str, **fields: Any) -> None:
        processors = structlog.get_config()["processors"]
        if processors is not self._processors or processors[-1] is not self._renderer:
            self.flush()
            structlog.get_logger(self._name).info(event, **fields)  # a fresh proxy: today's configuration
            return
        if not self._enabled:
            return
        fields["event"] = event
        printer = self._printer
        rendered: Any = fields
        try:
            for processor in processors:
                rendered = processor(printer, "info", rendered)
        except structlog.DropEvent:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or type(rendered) is not str:
            self.flush()
            printer.msg(rendered)
            return
        pending = self._pending
        pending.append(rendered)
        if len(pending) == 1:
            loop.call_soon(self.flush)
            _holding.add(self)
        elif len(pending) >= MAX_PENDING_LINES:
            self.flush()

    def flush(self) -> None:
        """Write the held lines (one ``print``: the same bytes as one per line)."""
        if self._pending:
            lines, self._pending = self._pending, []
            self._printer.msg("\n".join(lines))


@atexit.register
def _flush_held() -> None:
    for logger in list(_holding):
        logger.flush()


_direct: tuple[list[Any], TextIO, int] | None = None  # the chain, stream and level configure_logging set


def direct_logger(name: str) -> Any:
    """A :class:`DirectLogger` for the logging :func:`configure_logging` set up last; before any such
    call, or when info lines carry stack traces (``--zap-stacktrace-level`` info or debug),
    ``structlog.get_logger(name)``."""
    if _direct is None:
        return structlog.get_logger(name)
    return DirectLogger(name, *_direct)


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
    global _direct
    level = level_for(verbosity)
    out = stream if stream is not None else sys.stderr
    threshold = stacktrace_level or ("warn" if development else "error")
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _time_stamper(time_encoding),
        _stack_adder(threshold),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    processors = [*shared, structlog.processors.format_exc_info, renderer]
    # with stack traces on info lines the direct path would add its own frame to them: no direct path then
    _direct = (processors, out, level) if _LEVEL_RANK[threshold] > _LEVEL_RANK["info"] else None
    structlog.configure(
        processors=processors,
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
