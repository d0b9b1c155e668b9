"""Parameters of the data layer's plugins, validated as the Go EPP validates them.

``metrics-data-source`` (GIE + llm-d-router; defaults in parentheses)::

    scheme: http | https        (unset: --model-server-metrics-scheme, default http)
    path: /metrics              (a path without a leading "/" gets one, as Go's URL does)
    insecureSkipVerify: bool    (unset: --model-server-metrics-https-insecure-skip-verify, default true)
    port: 1-65535               (scrape this port instead of the endpoint's; unset: the endpoint's, or
                                 --model-server-metrics-port)
    interval: Go duration       (>= 0; rounded to base ticks of --refresh-metrics-interval; 0: every tick)
    caCertPath, clientCertPath, clientKeyPath: file paths (https only; see datalayer.connection)

``models-data-source``: the same without ``port``; ``path`` defaults to ``/v1/models`` and ``interval``
to 5 s here (upstream: every base tick; a /v1/models poll every 50 ms is wasted load).

``models-data-extractor``, ``dcgm-extractor``, ``endpoint-notification-source``: no parameters.
``file-discovery`` and ``multicluster-file-discovery``: ``path`` (required), ``watchFile`` (false); see
:mod:`datalayer.discovery.file_plugin`.
``dcgm-data-source``: see :mod:`datalayer.dcgm`.

``core-metrics-extractor``: ``engineConfigs`` (see :func:`datalayer.engines.parse_engine_configs`),
``defaultEngine`` (the engine of endpoints without an engine label; must name a built-in or configured
engine; default ``vllm``), ``engineLabelKey`` (the endpoint label naming the engine; default
``llm-d.ai/engine-type``, GIE's ``inference.networking.k8s.io/engine-type`` is always the fallback).

Durations (``interval``) are Go duration strings in the picker's one grammar (:mod:`scheduler.duration`,
documented in docs/scheduler.md, "Durations"). Unknown keys are rejected (llm-d-router decodes plugin
parameters strictly). TLS files are read when ``scheme: https`` is set here, so a missing CA file fails
at load; otherwise when the data layer starts.
:func:`validate_plugin_params` returns the validated values: ``path``, ``interval`` (seconds or None),
``connection`` (:class:`~datalayer.connection.SourceConnection`) for sources; ``engines`` (only when
``engineConfigs`` is set), ``default_engine``, ``engine_label_key`` for the extractor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from datalayer.connection import Connection, SourceConnection, TlsSettingsError
from datalayer.engines import BUILTIN_ENGINES, DEFAULT_ENGINE, EngineConfigError, parse_engine_configs
from datalayer.sources import ENGINE_LABEL_KEY
from scheduler.duration import go_duration

__all__ = ["ParamError", "go_duration", "validate_plugin_params"]

_TLS_KEYS = {
    "scheme",
    "path",
    "insecureSkipVerify",
    "interval",
    "caCertPath",
    "clientCertPath",
    "clientKeyPath",
}
_KEYS = {
    "metrics-data-source": _TLS_KEYS | {"port"},
    "models-data-source": _TLS_KEYS,
    "core-metrics-extractor": {"engineConfigs", "defaultEngine", "engineLabelKey"},
    "models-data-extractor": set(),
    "dcgm-data-source": {"scheme", "path", "port", "insecureSkipVerify", "useNodeAddress", "interval"},
    "dcgm-extractor": set(),
    "endpoint-notification-source": set(),
    "file-discovery": {"path", "watchFile"},
    "multicluster-file-discovery": {"path", "watchFile"},
}


class ParamError(ValueError):
    def __init__(self, message: str, location: str) -> None:
        self.message = message
        self.location = location
        super().__init__(f"{location}: {message}")


def _opt_str(p: Mapping[str, Any], key: str, location: str) -> str | None:
    value = p.get(key)
    if value is not None and not isinstance(value, str):
        raise ParamError(f"expected a string, got {value!r}", f"{location}.{key}")
    return value


def _interval(p: Mapping[str, Any], location: str) -> float | None:
    raw = _opt_str(p, "interval", location)
    if not raw:
        return None
    try:
        seconds = go_duration(raw)
    except ValueError:
        raise ParamError(
            f"invalid interval {raw!r}: expected a duration such as 1s or 500ms", f"{location}.interval"
        ) from None
    if seconds < 0:
        raise ParamError(f"interval must be non-negative, got {raw}", f"{location}.interval")
    return seconds


def _connection(p: Mapping[str, Any], location: str) -> SourceConnection:
    scheme = _opt_str(p, "scheme", location)
    if scheme is not None and scheme not in ("http", "https"):
        raise ParamError(f"unsupported scheme {scheme!r} (expected http or https)", f"{location}.scheme")
    skip = p.get("insecureSkipVerify")
    if skip is not None and not isinstance(skip, bool):
        raise ParamError(f"expected true or false, got {skip!r}", f"{location}.insecureSkipVerify")
    port = p.get("port")
    if port is not None:
        if isinstance(port, bool) or not isinstance(port, int):
            raise ParamError(f"expected an integer port, got {port!r}", f"{location}.port")
        if not 1 <= port <= 65535:
            raise ParamError(f"invalid port {port}: must be between 1 and 65535", f"{location}.port")
    conn = SourceConnection(
        scheme,
        port,
        skip,
        _opt_str(p, "caCertPath", location) or "",
        _opt_str(p, "clientCertPath", location) or "",
        _opt_str(p, "clientKeyPath", location) or "",
    )
    if scheme == "https":  # read the files now, as upstream's factory does
        try:
            conn.resolve(Connection("https")).tls.ssl_context()
        except TlsSettingsError as exc:
            key = "caCertPath" if "CA cert" in str(exc) else "clientCertPath"
            raise ParamError(str(exc), f"{location}.{key}") from None
    return conn


def _source_params(plugin_type: str, p: Mapping[str, Any], location: str) -> dict[str, Any]:
    params: dict[str, Any] = {"connection": _connection(p, location), "interval": _interval(p, location)}
    path = _opt_str(p, "path", location)
    if path is not None:
        params["path"] = path if path.startswith("/") else "/" + path
    return params


def _dcgm_params(p: Mapping[str, Any], location: str) -> dict[str, Any]:
    """dcgm-data-source: upstream's defaults are its own (http, port 9400, skip verify), not the flags'."""
    scheme = _opt_str(p, "scheme", location) or "http"
    if scheme not in ("http", "https"):
        raise ParamError(f"unsupported scheme {scheme!r} (expected http or https)", f"{location}.scheme")
    flags: dict[str, bool] = {}
    for key in ("insecureSkipVerify", "useNodeAddress"):
        value = p.get(key)
        if value is not None and not isinstance(value, bool):
            raise ParamError(f"expected true or false, got {value!r}", f"{location}.{key}")
        flags[key] = value if value is not None else key == "insecureSkipVerify"
    port = p.get("port", 9400)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ParamError(f"expected a port number (0-65535), got {port!r}", f"{location}.port")
    if flags["useNodeAddress"] and port == 0:
        raise ParamError("useNodeAddress requires a non-zero port", f"{location}.useNodeAddress")
    path = _opt_str(p, "path", location) or "/metrics"
    return {  # upstream's names, resolved; plus the connection and the interval in seconds
        "scheme": scheme,
        "path": path if path.startswith("/") else "/" + path,
        "port": port,
        **flags,
        "interval": _interval(p, location),
        "connection": SourceConnection(scheme, port, flags["insecureSkipVerify"]),
    }


def _file_discovery_params(p: Mapping[str, Any], location: str) -> dict[str, Any]:
    """file-discovery: ``path`` (required), ``watchFile`` (default false)."""
    path = _opt_str(p, "path", location)
    if not path:
        raise ParamError("'path' parameter is required (the endpoints file)", f"{location}.path")
    watch = p.get("watchFile", False)
    if not isinstance(watch, bool):
        raise ParamError(f"expected true or false, got {watch!r}", f"{location}.watchFile")
    return {"path": path, "watchFile": watch}


def _extractor_params(p: Mapping[str, Any], location: str) -> dict[str, Any]:
    params: dict[str, Any] = {}
    engines = BUILTIN_ENGINES
    if p.get("engineConfigs") is not None:
        try:
            engines = params["engines"] = parse_engine_configs(
                p["engineConfigs"], f"{location}.engineConfigs"
            )
        except EngineConfigError as exc:
            raise ParamError(exc.reason, exc.location) from None
    default = _opt_str(p, "defaultEngine", location) or DEFAULT_ENGINE
    if default not in engines:
        raise ParamError(
            f"defaultEngine {default!r} not found in engineConfigs (known: {', '.join(sorted(engines))})",
            f"{location}.defaultEngine",
        )
    params["default_engine"] = default
    params["engine_label_key"] = _opt_str(p, "engineLabelKey", location) or ENGINE_LABEL_KEY
    return params


def validate_plugin_params(plugin_type: str, parameters: Any, location: str) -> dict[str, Any]:
    """Validated parameters of a data-layer plugin (see the module docstring); raises :class:`ParamError`."""
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, Mapping):
        raise ParamError(f"expected a mapping, got {parameters!r}", location)
    allowed = _KEYS[plugin_type]
    unknown = sorted(set(parameters) - allowed)
    if unknown:
        raise ParamError(f"unknown parameter (expected one of {sorted(allowed)})", f"{location}.{unknown[0]}")
    if plugin_type == "core-metrics-extractor":
        return _extractor_params(parameters, location)
    if plugin_type in ("models-data-extractor", "dcgm-extractor", "endpoint-notification-source"):
        return {}
    if plugin_type == "dcgm-data-source":
        return _dcgm_params(parameters, location)
    if plugin_type in ("file-discovery", "multicluster-file-discovery"):
        return _file_discovery_params(parameters, location)
    return _source_params(plugin_type, parameters, location)
