"""Mutual TLS between the real Envoy and the picker (``--grpc-client-ca-file``, both engines): Envoy
configured with a client certificate the CA signed routes through the picker; the same Envoy without a
certificate, or with one from another CA, cannot open the ext_proc stream and (fail-closed) answers 500."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from e2e_lib import completion, decisions, running, served_by

from devtools.stack import Stack, StackSpec
from epp.server.tls import CertPair, self_signed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _write(pair: CertPair, directory: Path, stem: str) -> tuple[str, str]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{stem}.crt").write_bytes(pair.cert_pem)
    (directory / f"{stem}.key").write_bytes(pair.key_pem)
    return str(directory / f"{stem}.crt"), str(directory / f"{stem}.key")


def _envoy_with(stack: Stack, client: tuple[str, str]) -> None:
    stack.spec = dataclasses.replace(stack.spec, picker_client_cert=client)
    stack.start_envoy("gie-fail-closed")


@pytest.mark.parametrize("engine", ["h2", "ngh2", "grpcio"])
def test_envoy_needs_a_client_certificate_the_picker_trusts(tmp_path: Path, engine: str) -> None:
    # The gateway's certificate is self-signed (a CA of its own): trusting it is trusting that CA.
    gateway = _write(self_signed(), tmp_path / "gateway", "tls")
    intruder = _write(self_signed(), tmp_path / "intruder", "tls")
    server_dir = tmp_path / "server"
    _write(self_signed(), server_dir, "tls")
    spec = StackSpec(
        servers=2,
        sim_args=("--time-scale", "50"),
        picker_tls=True,
        picker_client_cert=gateway,
        picker_args=(
            "--grpc-engine",
            engine,
            "--cert-path",
            str(server_dir),
            "--grpc-client-ca-file",
            gateway[0],
        ),
    )
    with running(spec) as stack:
        for i in range(3):
            r = completion(stack, f"mutual tls {i} " * 8, request_id=f"mtls-{engine}-{i}")
            assert r.status_code == 200, r.text
            assert decisions(stack)[f"mtls-{engine}-{i}"][0] == f"127.0.0.1:{served_by(r)}"
        for client in (("", ""), intruder):
            _envoy_with(stack, client)
            r = completion(stack, "no trusted certificate", request_id=f"refused-{engine}-{client[0] != ''}")
            assert r.status_code == 500, r.text
            assert "x-inference-port" not in r.headers
            assert f"refused-{engine}-{client[0] != ''}" not in decisions(stack)
        _envoy_with(stack, gateway)  # the picker still serves the trusted gateway afterwards
        assert completion(stack, "trusted again").status_code == 200
