"""The Envoy configurations in deploy/envoy: rendered by devtools.envoy_config, accepted by the real Envoy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.envoy_config import (
    TEMPLATE_DIR,
    VARIANTS,
    EnvoyConfigError,
    EnvoyParams,
    main,
    render,
    validate,
    write_config,
)
from epp.server.tls import self_signed

PARAMS = EnvoyParams(
    listen_port=18081, admin_port=19001, picker_port=19002, endpoints=("127.0.0.1:8000", "10.0.0.2:8001")
)
EXT_PROC = "envoy.filters.http.ext_proc"


def http_filters(doc: dict[str, Any]) -> list[dict[str, Any]]:
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return list(hcm["http_filters"])


def ext_procs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f["typed_config"] for f in http_filters(doc) if f["name"] == EXT_PROC]


def clusters(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["static_resources"]["clusters"]}


def routes(doc: dict[str, Any]) -> list[dict[str, Any]]:
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return list(hcm["route_config"]["virtual_hosts"][0]["routes"])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("tls", [True, False])
def test_every_variant_passes_envoy_validate(variant: str, tls: bool, tmp_path: Path) -> None:
    params = EnvoyParams(**{**_fields(PARAMS), "picker_tls": tls})
    validate(write_config(variant, params, tmp_path / f"{variant}.yaml"))


def _fields(p: EnvoyParams) -> dict[str, Any]:
    return {name: getattr(p, name) for name in p.__slots__}


def test_subset_hint_filter_config_passes_envoy_validate(tmp_path: Path) -> None:
    params = EnvoyParams(**{**_fields(PARAMS), "subset_hint_header": "x-test-subset"})
    validate(write_config("gie-fail-closed", params, tmp_path / "subset.yaml"))


@pytest.mark.parametrize("variant", ["gie-fail-closed", "override-host", "observability"])
def test_served_endpoint_report_passes_envoy_validate(tmp_path: Path, variant: str) -> None:
    params = EnvoyParams(**{**_fields(PARAMS), "report_served_endpoint": True})
    doc = render(variant, params)
    filters = http_filters(doc)
    assert filters[-2]["name"] == "envoy.filters.http.header_to_metadata"  # before the router
    rule = filters[-2]["typed_config"]["response_rules"][0]
    assert rule["on_header_present"]["metadata_namespace"] == "envoy.lb"
    assert rule["header"] == rule["on_header_present"]["key"] == "x-gateway-destination-endpoint-served"
    validate(write_config(variant, params, tmp_path / "served.yaml"))


def test_validate_reports_envoy_message_for_a_broken_config(tmp_path: Path) -> None:
    doc = render("gie-fail-closed", PARAMS)
    clusters(doc)["original_destination_cluster"]["lb_policy"] = "NOT_A_POLICY"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(EnvoyConfigError, match="NOT_A_POLICY"):
        validate(path)


def test_gie_config_uses_the_gie_processing_mode_and_original_dst_routing() -> None:
    doc = render("gie-fail-closed", PARAMS)
    (ext,) = ext_procs(doc)
    assert ext["processing_mode"] == {
        "request_header_mode": "SEND",
        "response_header_mode": "SEND",
        "request_body_mode": "FULL_DUPLEX_STREAMED",
        "response_body_mode": "FULL_DUPLEX_STREAMED",
        "request_trailer_mode": "SEND",
        "response_trailer_mode": "SEND",
    }
    assert ext["message_timeout"] == "1000s"
    assert ext["failure_mode_allow"] is False
    assert ext["allow_mode_override"] is False
    assert "envoy.lb.subset_hint" in ext["metadata_options"]["forwarding_namespaces"]["untyped"]
    assert ext["metadata_options"]["receiving_namespaces"]["untyped"] == ["envoy.lb"]
    dst = clusters(doc)["original_destination_cluster"]
    assert (dst["type"], dst["lb_policy"]) == ("ORIGINAL_DST", "CLUSTER_PROVIDED")
    assert dst["original_dst_lb_config"] == {
        "use_http_header": True,
        "http_header_name": "x-gateway-destination-endpoint",
    }
    picker = clusters(doc)["endpoint_picker"]
    assert picker["transport_socket"]["name"] == "envoy.transport_sockets.tls"
    address = picker["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"] == {"address": "127.0.0.1", "port_value": 19002}


def test_plaintext_removes_only_the_picker_tls() -> None:
    doc = render("gie-fail-closed", EnvoyParams(**{**_fields(PARAMS), "picker_tls": False}))
    assert "transport_socket" not in clusters(doc)["endpoint_picker"]


@pytest.mark.parametrize("variant", sorted(set(VARIANTS) - {"round-robin"}))
def test_picker_client_certificate_passes_envoy_validate(variant: str, tmp_path: Path) -> None:
    pair = self_signed()
    (tmp_path / "c.crt").write_bytes(pair.cert_pem)
    (tmp_path / "c.key").write_bytes(pair.key_pem)
    params = EnvoyParams(
        **{
            **_fields(PARAMS),
            "picker_client_cert": str(tmp_path / "c.crt"),
            "picker_client_key": str(tmp_path / "c.key"),
        }
    )
    doc = render(variant, params)
    common = clusters(doc)["endpoint_picker"]["transport_socket"]["typed_config"]["common_tls_context"]
    assert common["tls_certificates"] == [
        {
            "certificate_chain": {"filename": str(tmp_path / "c.crt")},
            "private_key": {"filename": str(tmp_path / "c.key")},
        }
    ]
    assert common["alpn_protocols"] == ["h2"]
    validate(write_config(variant, params, tmp_path / f"{variant}.yaml"))


def test_fail_open_buffers_the_request_body_and_falls_back_to_all_servers() -> None:
    doc = render("gie-fail-open", PARAMS)
    (ext,) = ext_procs(doc)
    assert ext["failure_mode_allow"] is True
    assert ext["processing_mode"]["request_body_mode"] == "BUFFERED"
    first, fallback = routes(doc)
    assert first["match"]["headers"] == [{"name": "x-gateway-destination-endpoint", "present_match": True}]
    assert fallback["route"]["cluster"] == "model_servers"
    # a client cannot pick the upstream itself while the picker is down
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    (early,) = hcm["early_header_mutation_extensions"]
    assert early["typed_config"]["mutations"] == [{"remove": "x-gateway-destination-endpoint"}]
    endpoints = clusters(doc)["model_servers"]["load_assignment"]["endpoints"][0]["lb_endpoints"]
    got = [e["endpoint"]["address"]["socket_address"] for e in endpoints]
    assert got == [{"address": "127.0.0.1", "port_value": 8000}, {"address": "10.0.0.2", "port_value": 8001}]


def test_override_host_reads_header_then_metadata_and_retries_on_other_hosts() -> None:
    doc = render("override-host", PARAMS)
    policy = clusters(doc)["model_servers"]["load_balancing_policy"]["policies"][0]["typed_extension_config"]
    assert policy["name"] == "envoy.load_balancing_policies.override_host"
    assert policy["typed_config"]["override_host_sources"] == [
        {"header": "x-gateway-destination-endpoint"},
        {"metadata": {"key": "envoy.lb", "path": [{"key": "x-gateway-destination-endpoint"}]}},
    ]
    retry = routes(doc)[0]["route"]["retry_policy"]
    assert retry["retry_host_predicate"][0]["name"] == "envoy.retry_host_predicates.previous_hosts"
    assert "connect-failure" in retry["retry_on"]
    (ext,) = ext_procs(doc)
    assert (ext["failure_mode_allow"], ext["processing_mode"]["request_body_mode"]) == (True, "BUFFERED")


def test_cheaper_variants_change_only_the_response_phase() -> None:
    (nb,) = ext_procs(render("no-response-body", PARAMS))
    assert nb["processing_mode"]["response_body_mode"] == "NONE"
    assert nb["processing_mode"]["request_body_mode"] == "FULL_DUPLEX_STREAMED"
    routing, observer = ext_procs(render("observability", PARAMS))
    assert routing["processing_mode"]["response_body_mode"] == "NONE"
    assert "observability_mode" not in routing
    assert observer["observability_mode"] is True
    assert observer["processing_mode"]["request_body_mode"] == "NONE"


def test_round_robin_has_no_picker() -> None:
    doc = render("round-robin", PARAMS)
    assert ext_procs(doc) == []
    assert set(clusters(doc)) == {"model_servers"}


def test_subset_hint_header_goes_into_envoy_lb_subset_hint_before_ext_proc() -> None:
    doc = render("gie-fail-closed", EnvoyParams(**{**_fields(PARAMS), "subset_hint_header": "x-test-subset"}))
    names = [f["name"] for f in http_filters(doc)]
    assert names.index("envoy.filters.http.header_to_metadata") == names.index(EXT_PROC) - 1
    rule = http_filters(doc)[0]["typed_config"]["request_rules"][0]
    assert rule["header"] == "x-test-subset"
    assert rule["on_header_present"]["metadata_namespace"] == "envoy.lb.subset_hint"
    assert rule["on_header_present"]["key"] == "x-gateway-destination-endpoint-subset"


@pytest.mark.parametrize(
    ("params", "variant", "message"),
    [
        (PARAMS, "nope", "unknown Envoy config variant 'nope'"),
        (
            EnvoyParams(listen_port=1, admin_port=2),
            "gie-fail-open",
            "needs at least one model-server endpoint",
        ),
        (
            EnvoyParams(listen_port=1, admin_port=2, endpoints=("10.0.0.1",)),
            "round-robin",
            "expected host:port",
        ),
        (EnvoyParams(listen_port=1, admin_port=2, endpoints=("h:99999",)), "round-robin", "port in 1-65535"),
        (
            EnvoyParams(listen_port=1, admin_port=2, endpoints=("h:1",), subset_hint_header="x"),
            "round-robin",
            "no ext_proc filter",
        ),
        (EnvoyParams(1, 2, picker_client_cert="c.crt"), "gie-fail-closed", "must be given together"),
        (
            EnvoyParams(1, 2, picker_tls=False, picker_client_cert="c", picker_client_key="k"),
            "gie-fail-closed",
            "needs TLS to the picker",
        ),
        (
            EnvoyParams(1, 2, endpoints=("h:1",), picker_client_cert="c", picker_client_key="k"),
            "round-robin",
            "no TLS endpoint_picker cluster",
        ),
    ],
)
def test_render_errors_name_the_problem(params: EnvoyParams, variant: str, message: str) -> None:
    with pytest.raises(EnvoyConfigError, match=message):
        render(variant, params)


def test_templates_use_only_known_placeholders() -> None:
    for name, _ in VARIANTS.values():
        text = (TEMPLATE_DIR / name).read_text()
        assert "TODO" not in text
        for line in text.splitlines():
            if "${" in line:
                assert any(f"${{{p}}}" in line for p in EnvoyParams(1, 2).substitutions()), line


def test_cli_renders_and_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cfg.yaml"
    argv = ["override-host", "--listen-port", "18090", "--endpoints", "127.0.0.1:8000", "-o", str(out)]
    assert main([*argv, "--validate"]) == 0
    assert clusters(yaml.safe_load(out.read_text()))["model_servers"]
    assert main(["gie-fail-open", "-o", str(out)]) == 1
    assert "needs at least one model-server endpoint" in capsys.readouterr().err
