"""The ``epp`` process: logging, event loop (uvloop when installed), signals, exit status."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable

from epp.app.build import build_app
from epp.app.errors import StartupError
from epp.config.options import Options

__all__ = ["run", "serve"]


async def run(options: Options, stop: asyncio.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or ``stop`` is set). Raises StartupError before serving."""
    stop = stop or asyncio.Event()
    app = await build_app(options)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await app.start()
    except RuntimeError as exc:  # a port cannot be bound
        await app.stop()
        raise StartupError(str(exc)) from None
    try:
        await stop.wait()
    finally:
        await app.stop()
    return 0


def serve(options: Options) -> int:
    """The ``epp`` process: logging, event loop (uvloop when installed), run, exit status."""
    from epp.server.logs import configure_logging

    configure_logging(
        options.verbosity,
        options.log_format,
        time_encoding=options.zap_time_encoding,
        stacktrace_level=options.zap_stacktrace_level,
        development=options.zap_devel,
    )
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(run(options))
    except StartupError as exc:
        print(f"epp: {exc}", file=sys.stderr)  # once, as plain text (no log line repeating it)
        return 1
