"""The HTTP side port (``--metrics-port``): ``/metrics`` and the debug endpoints (aiohttp).

* ``GET /metrics``: Prometheus text exposition of the picker's registry.
* ``GET /debug/endpoints``: every endpoint with its latest state (JSON list).
* ``GET /debug/decisions?n=20``: the newest ``n`` scheduling decisions, newest first (JSON list;
  ``n`` defaults to 20, at most the ring's capacity; a non-integer ``n`` is a 400).
* ``GET /debug/config``: the resolved configuration (flags and EndpointPickerConfig), JSON.
* ``GET /debug/plugins/state``: ``{plugin name: state}`` for every plugin that reports its state
  (a ``dump_state()`` method, as llm-d-router's StateDumper; e.g. ``predicted-latency-producer``'s model).

With a bearer token configured every path requires ``Authorization: Bearer <token>`` (401 otherwise,
compared in constant time): the debug endpoints expose as much about the pool as the metrics do.
With ``--metrics-cert-dir`` the port serves HTTPS (:func:`metrics_tls_context`), and with
``--metrics-client-ca-file`` only clients presenting a certificate that CA signed get through the handshake.
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from epp.server.decisions import DecisionLog
from epp.server.tls import CertDir, TlsError
from scheduler.types import EndpointView

_log = logging.getLogger("epp.http")

__all__ = ["MetricsTls", "endpoint_json", "make_http_app", "metrics_tls_context", "start_http"]


def endpoint_json(endpoint: EndpointView, now: float) -> dict[str, Any]:
    """One endpoint's state as JSON-ready data (``age_seconds`` from the monotonic ``now``)."""
    m = endpoint.metrics
    out: dict[str, Any] = {
        "address": endpoint.address,
        "name": endpoint.name,
        "ready": endpoint.ready,
        "labels": dict(endpoint.labels),
        "metrics": {
            "waiting_queue_size": m.waiting_queue_size,
            "running_requests": m.running_requests,
            "kv_cache_usage": m.kv_cache_usage,
            "max_lora": m.max_lora,
            "running_adapters": sorted(m.running_adapters),
            "waiting_adapters": sorted(m.waiting_adapters),
            "block_size": m.block_size,
            "num_gpu_blocks": m.num_gpu_blocks,
            "age_seconds": round(now - m.updated_at, 3) if m.updated_at else None,
        },
        "attributes": {k: _plain(v) for k, v in endpoint.attributes.items()},
    }
    for extra in ("engine", "health", "last_error"):  # data-layer records carry these
        if hasattr(endpoint, extra):
            out[extra] = _plain(getattr(endpoint, extra))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return str(value)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(data, default=str, option=orjson.OPT_INDENT_2),
        status=status,
        content_type="application/json",
    )


async def _json_state(plugin_state: Callable[[], Mapping[str, Any]]) -> web.Response:
    return _json(plugin_state())


def make_http_app(
    registry: CollectorRegistry,
    *,
    snapshot: Callable[[], Sequence[EndpointView]],
    decisions: DecisionLog,
    config: Callable[[], Mapping[str, Any]],
    plugin_state: Callable[[], Mapping[str, Any]] = dict,
    token: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> web.Application:
    expected = f"Bearer {token}".encode() if token else None

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if expected is not None:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return web.json_response(
                    {"error": {"type": "unauthorized", "message": "a valid bearer token is required"}},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="epp"'},
                )
        response: web.StreamResponse = await handler(request)
        return response

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def endpoints(_: web.Request) -> web.Response:
        now = clock()
        return _json([endpoint_json(e, now) for e in snapshot()])

    async def recent(request: web.Request) -> web.Response:
        raw = request.query.get("n", "20")
        if not raw.isdigit():
            return _json(
                {"error": {"type": "bad_request", "message": f"n: expected an integer, got {raw!r}"}}, 400
            )
        return _json(decisions.last(min(int(raw), decisions.capacity)))

    async def resolved(_: web.Request) -> web.Response:
        return _json(config())

    app = web.Application(middlewares=[auth])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/debug/endpoints", endpoints)
    app.router.add_get("/debug/decisions", recent)
    app.router.add_get("/debug/config", resolved)
    app.router.add_get("/debug/plugins/state", lambda _: _json_state(plugin_state))
    return app


class MetricsTls:
    """The metrics port's TLS context and the certificate directory it reloads from: as
    controller-runtime's certificate watcher, a changed, valid ``tls.crt`` / ``tls.key`` pair is loaded
    into the context (checked every ``interval`` seconds by :meth:`watch`) and serves the next handshake;
    a half-written pair is skipped until complete."""

    def __init__(self, cert_dir: str, client_ca_file: str | None = None, interval: float = 1.0) -> None:
        self.context = metrics_tls_context(cert_dir, client_ca_file)
        self.source = CertDir(cert_dir)
        self.source.load()
        self.interval = interval

    def reload_once(self) -> bool:
        """Load the directory's pair if it changed and is valid (True when loaded)."""
        if self.source.changed() is None:
            return False
        self.context.load_cert_chain(self.source.cert_file, self.source.key_file)
        return True

    async def watch(self) -> None:
        """Reload forever (run as a task; cancel to stop)."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.reload_once()
            except (OSError, ssl.SSLError) as exc:  # replaced between the check and the load
                _log.warning("metrics certificate reload skipped: %s", exc)


def metrics_tls_context(cert_dir: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    """TLS for the metrics port (``--metrics-cert-dir``, ``--metrics-client-ca-file``), as
    controller-runtime's secure metrics server: ``tls.crt`` / ``tls.key`` from ``cert_dir``, TLS >= 1.2,
    and with a client CA file a client certificate signed by it is required and verified. Raises
    TlsError naming the file."""
    cert, key = os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key")
    CertDir(cert_dir).load()  # readable, PEM, key matches: a clear error now, not at the first scrape
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"{client_ca_file}: no valid CA certs in metrics client CA file ({exc})") from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


async def start_http(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on host:port (HTTPS with ``ssl_context``); returns the runner (``await
    runner.cleanup()`` stops it) and the bound port."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise RuntimeError(f"--metrics-port: cannot listen on {host}:{port}: {exc.strerror}") from None
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)
