"""A picker and a client that disagree on TLS: the client gets Envoy's 500, the picker says why.

Real processes: the picker (``--grpc-engine=h2``, the default, and ``ngh2``, whose connections the same
server accepts and classifies; grpc.aio at the end), the real Envoy with
a GIE config rendered for the other TLS setting, raw sockets for the cases Envoy cannot produce."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Iterator

import httpx
import pytest
from e2e_lib import eventually, running

from devtools.stack import Stack, StackSpec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

SIM_ARGS = ("--time-scale", "50")


def _log(stack: Stack) -> str:
    return (stack.workdir / "picker.log").read_text(encoding="utf-8", errors="replace")


def _post(stack: Stack) -> httpx.Response:
    return httpx.post(f"{stack.base_url}/v1/completions", json={"model": "m", "prompt": "hi"}, timeout=10.0)


ENGINES = ["h2", "ngh2"]


@pytest.fixture(params=ENGINES)
def tls_picker_plaintext_envoy(request: pytest.FixtureRequest) -> Iterator[Stack]:
    # Envoy rendered --picker-plaintext (picker_tls False), the picker on its TLS default (the last
    # --secure-serving wins), at -v 1: the commonest mistake
    args = ("--secure-serving=true", f"--grpc-engine={request.param}")
    spec = StackSpec(servers=1, sim_args=SIM_ARGS, picker_args=args)
    with running(spec) as stack:
        yield stack


def test_plaintext_envoy_against_the_tls_picker_is_explained_once(tls_picker_plaintext_envoy: Stack) -> None:
    stack = tls_picker_plaintext_envoy
    answers = [(r.status_code, r.content) for r in (_post(stack) for _ in range(3))]
    assert answers == [(500, b"")] * 3  # the README's troubleshooting row: 500 with an empty body
    assert eventually(lambda: "plaintext client connected to the TLS ext_proc port" in _log(stack)), _log(
        stack
    )
    time.sleep(0.5)
    log = _log(stack)
    assert log.count("plaintext client connected") == 1, log  # rate-limited: one per minute
    line = next(ln for ln in log.splitlines() if "plaintext client connected" in ln)
    assert "peer" in line and "127.0.0.1:" in line and "warning" in line
    assert "--secure-serving=false" in line and "--picker-plaintext" in line


def test_a_client_that_verifies_the_self_signed_certificate_fails_the_handshake_explained(
    tls_picker_plaintext_envoy: Stack,
) -> None:
    stack = tls_picker_plaintext_envoy
    context = ssl.create_default_context()  # verifies: the self-signed certificate is refused
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", stack.ports.grpc), timeout=5) as raw,
        pytest.raises(ssl.SSLError),
    ):
        context.wrap_socket(raw, server_hostname="localhost")
    assert eventually(lambda: "TLS handshake failed" in _log(stack)), _log(stack)
    line = next(ln for ln in _log(stack).splitlines() if "TLS handshake failed" in ln)
    assert "--tls-min-version" in line and "--cert-path" in line


@pytest.fixture(params=ENGINES)
def plaintext_picker_tls_envoy(request: pytest.FixtureRequest) -> Iterator[Stack]:
    args = ("--secure-serving=false", f"--grpc-engine={request.param}")
    spec = StackSpec(servers=1, sim_args=SIM_ARGS, picker_tls=True, picker_args=args)
    with running(spec) as stack:
        yield stack


def test_tls_envoy_against_the_plaintext_picker_is_explained(plaintext_picker_tls_envoy: Stack) -> None:
    stack = plaintext_picker_tls_envoy
    assert _post(stack).status_code == 500
    assert eventually(lambda: "TLS client connected to the plaintext ext_proc port" in _log(stack)), _log(
        stack
    )
    line = next(ln for ln in _log(stack).splitlines() if "TLS client connected" in ln)
    assert "drop --secure-serving=false" in line and "--picker-plaintext" in line and "127.0.0.1:" in line


def test_http1_on_the_ext_proc_port_is_explained(plaintext_picker_tls_envoy: Stack) -> None:
    stack = plaintext_picker_tls_envoy
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"http://127.0.0.1:{stack.ports.grpc}/v1/completions", json={}, timeout=5.0)
    assert eventually(lambda: "does not speak HTTP/2 gRPC" in _log(stack)), _log(stack)
    assert "Envoy's listener" in _log(stack)


def test_envoy_answers_an_empty_500_when_the_picker_is_unreachable() -> None:
    """The README's troubleshooting row: gie-fail-closed with no picker listening, nothing to log."""
    with running(StackSpec(servers=1, sim_args=SIM_ARGS, picker=False)) as stack:
        response = _post(stack)
        assert (response.status_code, response.content) == (500, b"")


@pytest.mark.parametrize("picker_tls", [True, False], ids=["tls-picker", "plaintext-picker"])
def test_the_grpcio_engine_answers_500_and_says_at_startup_it_cannot_explain_why(picker_tls: bool) -> None:
    """grpc.aio accepts and closes a mismatched connection inside gRPC (no Python hook sees it; gRPC's
    own line, on the TLS port only, names no peer): the picker's startup line says so instead."""
    serving = f"--secure-serving={'true' if picker_tls else 'false'}"
    spec = StackSpec(
        servers=1, sim_args=SIM_ARGS, picker_tls=not picker_tls, picker_args=("--grpc-engine=grpcio", serving)
    )
    with running(spec) as stack:
        assert _post(stack).status_code == 500
        log = _log(stack)
        notice = next(json.loads(ln) for ln in log.splitlines() if "ext_proc on grpc.aio" in ln)
        assert notice["level"] == "info" and notice["tls"] is picker_tls and notice["engine"] == "grpcio"
        assert "Envoy answers its client 500" in notice["event"] and "--picker-plaintext" in notice["event"]
        assert "client connected" not in log  # the h2 engine's explanations are not claimed
