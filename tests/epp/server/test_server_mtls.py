"""Mutual TLS on the ext_proc port (``--grpc-client-ca-file``) with the real ``epp`` process on both engines:
a client certificate signed by the CA is served, no certificate or one from another CA is refused in the
handshake, before and after a server-certificate reload; plus the flag's usage and startup errors."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
from pathlib import Path

import grpc
import pytest
from certs import make_pki
from srv_helpers import request_body, request_headers, stub
from test_server_app import BODY, _flags, _wait_serving, model_servers
from test_server_upstream_flags_process import _port, _start, _stop

from epp.app import StartupError, build_app
from epp.config.options import UsageError, parse_options

__all__ = ["model_servers"]  # the fixture, imported for these tests


def _credentials(root: Path, client: tuple[Path, Path] | None) -> grpc.ChannelCredentials:
    key, chain = (client[1].read_bytes(), client[0].read_bytes()) if client else (None, None)
    return grpc.ssl_channel_credentials(root.read_bytes(), private_key=key, certificate_chain=chain)


async def _route(port: int, root: Path, client: tuple[Path, Path] | None) -> str:
    """One ext_proc exchange over TLS trusting ``root``, presenting ``client`` (cert, key) if given."""
    creds = _credentials(root, client)
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds) as ch:
        call = stub(ch).Process()
        await call.write(request_headers())
        await call.write(request_body(BODY))
        resp = await asyncio.wait_for(call.read(), 10)
        call.cancel()
        return str(resp.WhichOneof("response"))


def _raw_handshake(port: int, root: Path, client: tuple[Path, Path] | None) -> bytes:
    """An ssl-module client: handshake, send the HTTP/2 preface, read what the server answers (b"": the
    handshake or the connection was refused)."""
    context = ssl.create_default_context(cafile=str(root))
    context.set_alpn_protocols(["h2"])
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            return tls.recv(9)  # TLS 1.3: a refused certificate surfaces here, as an alert
    except (ssl.SSLError, ConnectionError):
        return b""


def _swap_server_pair(server_dir: Path, new_dir: Path) -> None:
    for name in ("tls.key", "tls.crt"):
        shutil.copy(new_dir / name, server_dir / f".{name}")
        os.replace(server_dir / f".{name}", server_dir / name)
    os.utime(server_dir / "tls.crt", ns=(1, 1))  # a different stamp even within one mtime tick


@pytest.mark.parametrize("engine", ["h2", "ngh2", "grpcio"])
async def test_client_certificates_are_required_and_survive_a_certificate_reload(
    model_servers: list[str], engine: str, tmp_path: Path
) -> None:
    pki, rotated = make_pki(tmp_path / "a"), make_pki(tmp_path / "b")
    flags = _flags(
        model_servers, "--grpc-engine", engine, "--cert-path", str(pki["server_dir"]),
        "--enable-cert-reload", "--grpc-client-ca-file", str(pki["ca"]),
    )  # fmt: skip
    proc = await _start(flags)
    port = _port(flags, "--grpc-port")
    ours = (pki["client_cert"], pki["client_key"])
    foreign = (pki["other_client_cert"], pki["other_client_key"])
    try:
        await _wait_serving(_port(flags, "--grpc-health-port"), timeout=20)
        assert await _route(port, pki["ca"], ours) == "request_headers"
        for client in (None, foreign):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _route(port, pki["ca"], client)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert _raw_handshake(port, pki["ca"], client) == b""
        assert len(_raw_handshake(port, pki["ca"], ours)) == 9  # the server's SETTINGS frame header
        # the server certificate rotates (signed by another CA); the client CA requirement stays
        _swap_server_pair(pki["server_dir"], rotated["server_dir"])
        for _ in range(100):  # h2 checks the files every second, grpcio before each handshake
            try:
                await _route(port, rotated["ca"], ours)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the rotated server certificate was never served")
        for client in (None, foreign):
            with pytest.raises(grpc.aio.AioRpcError):
                await _route(port, rotated["ca"], client)
        assert proc.returncode is None
    finally:
        await _stop(proc)


def test_client_ca_flag_needs_tls_and_an_existing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--secure-serving=false"):
        parse_options(["--endpoints", "127.0.0.1:1", "--secure-serving=false", "--grpc-client-ca-file", "x"])
    with pytest.raises(UsageError, match="--grpc-client-ca-file: not a readable file"):
        parse_options(["--endpoints", "127.0.0.1:1", "--grpc-client-ca-file", str(tmp_path / "none.pem")])
    assert parse_options(["--endpoints", "127.0.0.1:1"]).grpc_client_ca_file is None


@pytest.mark.parametrize("engine", ["h2", "ngh2", "grpcio"])
async def test_a_client_ca_file_without_a_certificate_fails_startup(tmp_path: Path, engine: str) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    options = parse_options(
        ["--endpoints", "127.0.0.1:1", "--grpc-engine", engine, "--grpc-client-ca-file", str(bad)]
    )
    with pytest.raises(StartupError, match=rf"--grpc-client-ca-file: {bad}: "):
        await build_app(options)
