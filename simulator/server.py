"""One simulated vLLM server: an aiohttp application around an engine, with lifecycle and fault controls.

``SimServer(config, tokenizer)``; ``await start()`` binds ``config.host:config.port`` (port 0 picks a
free port, see :attr:`SimServer.port`); ``await stop()`` shuts down gracefully.

Fault injection, in process or over HTTP (the admin endpoints are for tests and demos):

==========================================  =====================================================
``server.set_metrics_mode("hang")``          ``POST /admin/fault {"metrics": "hang"}``: /metrics never
                                             answers (the client times out); ``"error"``: 500;
                                             ``"ok"``: normal again
``server.set_ready(False)``                  ``POST /admin/fault {"ready": false}``: /health/ready 503
                                             and inference 503 (``true`` restores)
``await server.crash()``                     ``POST /admin/crash``: stop listening, drop every open
                                             connection, abort every request; the port refuses
                                             connections until ``start()`` is called again,
                                             which restarts it with an empty engine
==========================================  =====================================================

``--startup-duration`` keeps the server unready for that many real seconds after ``start()``.
With ``kv_events_endpoint`` set, KV cache events go out on ZMQ (see :mod:`simulator.kv_events`) with
topic :attr:`SimServer.kv_events_topic`; a restart after a crash first publishes ``AllBlocksCleared``.
``POST /reset_prefix_cache`` empties an idle cache (vLLM's endpoint).

Every response carries ``x-inference-pod`` and ``x-inference-port``. ``access_log=True`` logs each request
through the stdlib logger ``aiohttp.access`` (``epp-sim --log-level debug``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from simulator.api import SimApi
from simulator.config import SimConfig
from simulator.driver import EngineDriver, SimClock
from simulator.engine import Engine
from simulator.kv_events import AllBlocksCleared, ZmqKVEventPublisher, expand_endpoint
from simulator.metrics import CONTENT_TYPE, render_metrics
from simulator.protocol import ApiError, error_body, parse_json
from simulator.tokenizer import Tokenizer

__all__ = ["METRICS_MODES", "SimServer"]

METRICS_MODES = ("ok", "hang", "error")
_log = structlog.get_logger("simulator")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class SimServer:
    """A simulated vLLM server with its own engine state."""

    def __init__(
        self,
        config: SimConfig,
        tokenizer: Tokenizer,
        *,
        clock: SimClock | None = None,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        access_log: bool = False,
    ) -> None:
        self.config = config
        self._access_log = access_log
        self._monotonic = monotonic  # start-up delay clock (real seconds)
        self.tokenizer = tokenizer
        self.engine = self._new_engine(config, wall_clock)
        self.driver = EngineDriver(self.engine, clock or SimClock(config.time_scale))
        self.kv_publisher: ZmqKVEventPublisher | None = None
        self._crashed = False
        self.created = int(wall_clock())
        self.metrics_mode = "ok"
        self._wall = wall_clock
        self._ready_at = float("inf")
        self._forced_unready = False
        self._hang = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._port = config.port
        self._api = SimApi(self, random.Random(config.seed + 1))
        self._pod = config.pod_name or f"epp-sim-{config.port}"

    # -- lifecycle ----------------------------------------------------------------------------------
    @staticmethod
    def _new_engine(config: SimConfig, wall_clock: Callable[[], float]) -> Engine:
        events = bool(config.kv_events_endpoint)
        return Engine(config, random.Random(config.seed), wall_clock, record_kv_events=events)

    @property
    def kv_events_topic(self) -> str:
        """``kv@<host>:<port>@<model>``; the host is ``$POD_IP`` when binding all interfaces."""
        host = self.config.host
        if host in ("0.0.0.0", "::", ""):
            host = os.environ.get("POD_IP", "127.0.0.1")
        return f"kv@{host}:{self._port}@{self.config.metric_model_name}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        host = self.config.host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif ":" in host:
            host = "[::1]" if host == "::" else f"[{host}]"
        return f"http://{host}:{self._port}"

    @property
    def ready(self) -> bool:
        return not self._forced_unready and self._monotonic() >= self._ready_at

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=64 * 1024 * 1024)
        app.add_routes(self._api.routes())
        app.add_routes([
            web.get("/metrics", self.metrics),
            web.get("/health", self.health),
            web.get("/health/ready", self.health_ready),
            web.get("/get_load", self.load),
            web.get("/load", self.load),
            web.post("/admin/fault", self.admin_fault),
            web.post("/admin/crash", self.admin_crash),
            web.post("/reset_prefix_cache", self.reset_prefix_cache),
        ])  # fmt: skip
        app.on_response_prepare.append(self._identity_headers)
        return app

    async def start(self) -> None:
        """Bind and serve; the server is ready after ``startup_duration`` seconds."""
        if self._runner is not None:
            raise RuntimeError(f"server on port {self._port} is already running")
        restarted, self._crashed = self._crashed, False
        if restarted:  # a restarted pod comes back with an empty engine (cold cache, no adapters loaded)
            self.engine = self._new_engine(self.config, self._wall)
            self.driver = EngineDriver(self.engine, self.driver.clock)
        log = logging.getLogger("aiohttp.access") if self._access_log else None
        runner = web.AppRunner(self._app(), handler_cancellation=True, access_log=log, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self._port, reuse_address=True, backlog=1024)
        await site.start()
        self._runner = runner
        self._port = runner.addresses[0][1]
        if self.config.pod_name == "":
            self._pod = f"epp-sim-{self._port}"
        self._ready_at = self._monotonic() + self.config.startup_duration
        if self.config.kv_events_endpoint:
            try:
                self._open_publisher(restarted)
            except BaseException:
                self._runner = None
                await runner.cleanup()
                raise
        _log.info("sim_server_started", url=self.url, model=self.config.metric_model_name)

    def _open_publisher(self, restarted: bool) -> None:
        endpoint = expand_endpoint(self.config.kv_events_endpoint, self._port)
        mode = self.config.kv_events_mode
        bind = None if mode == "auto" else mode == "bind"
        try:
            publisher = ZmqKVEventPublisher(endpoint, self.kv_events_topic, wall_clock=self._wall, bind=bind)
        except ImportError as exc:
            raise OSError(
                f"--kv-events-endpoint needs pyzmq and msgpack (dependencies of pyepp; reinstall it): {exc}"
            ) from exc
        except Exception as exc:  # zmq.ZMQError: address in use, bad endpoint
            raise OSError(f"--kv-events-endpoint {endpoint}: {exc}") from exc
        self.kv_publisher = publisher
        self.driver.publish = publisher.publish
        if restarted:
            publisher.publish([AllBlocksCleared()])

    async def stop(self) -> None:
        """Graceful shutdown (open streams are cancelled)."""
        runner, self._runner = self._runner, None
        self._hang.set()
        if runner is not None:
            await runner.cleanup()
        self.driver.abort_all()
        self._close_publisher()

    def _close_publisher(self) -> None:
        publisher, self.kv_publisher = self.kv_publisher, None
        self.driver.publish = None
        if publisher is not None:
            publisher.close()

    async def crash(self) -> None:
        """Simulate a crashed pod: stop listening and drop every connection without a response."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._crashed = True
        server = runner.server
        for site in list(runner.sites):
            await site.stop()
        if server is not None:
            for handler in list(server.connections):
                transport = handler.transport
                if transport is not None:
                    transport.abort()
        self.driver.abort_all()
        self._close_publisher()
        with contextlib.suppress(Exception):
            await runner.cleanup()
        _log.warning("sim_server_crashed", port=self._port)

    # -- fault controls -----------------------------------------------------------------------------
    def set_metrics_mode(self, mode: str) -> None:
        if mode not in METRICS_MODES:
            raise ValueError(f"metrics mode must be one of {METRICS_MODES}, got {mode!r}")
        self.metrics_mode = mode
        if mode == "hang":
            self._hang.clear()
        else:
            self._hang.set()

    def set_ready(self, ready: bool) -> None:
        self._forced_unready = not ready

    def require_ready(self) -> None:
        if not self.ready:
            raise ApiError(503, "server is starting up", "ServiceUnavailableError")

    # -- middleware ---------------------------------------------------------------------------------
    async def _identity_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-inference-pod"] = self._pod
        response.headers["x-inference-port"] = str(self._port)

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return web.Response(body=error_body(exc.status, exc.message, exc.error_type, exc.param),
                                status=exc.status, content_type="application/json")  # fmt: skip
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return web.Response(body=error_body(exc.status, exc.reason), status=exc.status,
                                content_type="application/json")  # fmt: skip
        except ConnectionResetError:
            return web.Response(status=499)  # the client went away; nothing will be sent
        except Exception as exc:  # a bug must not take the server down: answer 500 and log it
            _log.exception("sim_handler_error", path=request.path)
            return web.Response(body=error_body(500, f"internal error: {exc!r}"), status=500,
                                content_type="application/json")  # fmt: skip

    # -- operational endpoints ----------------------------------------------------------------------
    async def metrics(self, request: web.Request) -> web.Response:
        if self.metrics_mode == "hang":
            await self._hang.wait()
        if self.metrics_mode == "error":
            raise ApiError(500, "metrics disabled by fault injection", "InternalServerError")
        return web.Response(body=render_metrics(self.engine), headers={"Content-Type": CONTENT_TYPE})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def health_ready(self, request: web.Request) -> web.Response:
        if self.ready:
            return web.Response(status=200)
        raise ApiError(503, "server is starting up", "ServiceUnavailableError")

    async def load(self, request: web.Request) -> web.Response:
        load = self.engine.num_running + self.engine.num_waiting
        return web.Response(body=orjson.dumps({"server_load": load}), content_type="application/json")

    async def admin_fault(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = parse_json(await request.read())
        mode = body.get("metrics")
        if mode is not None:
            if mode not in METRICS_MODES:
                raise ApiError(400, f"'metrics' must be one of {list(METRICS_MODES)}", param="metrics")
            self.set_metrics_mode(mode)
        ready = body.get("ready")
        if ready is not None:
            if not isinstance(ready, bool):
                raise ApiError(400, "'ready' must be a boolean", param="ready")
            self.set_ready(ready)
        return web.Response(body=orjson.dumps({"metrics": self.metrics_mode, "ready": self.ready}),
                            content_type="application/json")  # fmt: skip

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's ``POST /reset_prefix_cache``: drop all cached blocks (409 while requests hold blocks)."""
        if not self.engine.kv.clear():
            raise ApiError(409, "prefix cache in use by running requests", "ConflictError")
        self.driver.flush_events()
        return web.Response(status=200)

    async def admin_crash(self, request: web.Request) -> web.Response:
        async def crash_soon() -> None:
            await asyncio.sleep(0.01)  # let this response go out first
            await self.crash()

        task = asyncio.create_task(crash_soon())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.Response(body=b'{"crashing":true}', content_type="application/json")
