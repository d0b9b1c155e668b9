"""Logging set-up: structlog for our own events, the standard library routed through the same renderer.

Verbosity follows GIE's ``-v`` levels: 0 warnings and errors only; 1 (our default) adds startup,
shutdown and state changes; 2 one line per request (``request`` event: request id, model, target
model, chosen endpoints, profile, scheduling time, outcome); 3 verbose; 4 adds per-plugin scores
(the decision record) to the request line; 5 trace, the only level that may log prompt text.

``--log-format json`` (default, production) renders one JSON object per line; ``console`` renders
key=value lines for people. Output goes to ``stream`` (stderr by default).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import orjson
import structlog

__all__ = ["configure_logging", "level_for"]


def level_for(verbosity: int) -> int:
    """The stdlib level that ``-v verbosity`` enables."""
    if verbosity <= 0:
        return logging.WARNING
    if verbosity == 1 or verbosity == 2:
        return logging.INFO
    return logging.DEBUG


def _orjson_dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure_logging(verbosity: int, fmt: str, stream: TextIO | None = None) -> None:
    """Configure structlog and the root stdlib logger (idempotent; the last call wins)."""
    level = level_for(verbosity)
    out = stream if stream is not None else sys.stderr
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
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
    # gRPC's and aiohttp's access chatter only at trace verbosity
    for noisy in ("aiohttp.access", "grpc._cython.cygrpc"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbosity >= 5 else logging.WARNING)
