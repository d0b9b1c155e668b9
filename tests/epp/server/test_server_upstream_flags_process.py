"""llm-d-router's serving flags with the real ``epp`` process: drain on SIGTERM, ext_proc TLS version and
cipher floor (ssl-module clients), metrics over TLS with a required client certificate (httpx), stream
metrics, message size limits (both engines), and the Alpha-plugin gate at startup."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from certs import make_pki
from grpc_health.v1 import health_pb2
from srv_helpers import (
    FakeScheduler,
    make_server,
    request_body,
    request_headers,
    response_body,
    response_headers,
    stub,
)
from test_server_app import BODY, _flags, _health_of, _wait_serving, model_servers

from epp.app import StartupError, build_app
from epp.config.options import parse_options

__all__ = ["model_servers"]  # the fixture, imported for these tests


def _port(flags: list[str], name: str) -> int:
    return int(flags[flags.index(name) + 1])


async def _start(flags: list[str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "epp", *flags, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


@pytest.mark.parametrize("engine", ["grpcio", "h2", "ngh2"])
async def test_drain_timeout_lets_in_flight_streams_finish_refuses_new_ones_and_exits(
    model_servers: list[str], engine: str
) -> None:
    flags = _flags(
        model_servers, "--secure-serving=false", "--drain-timeout", "20s", "--grpc-engine", engine,
        "--zap-time-encoding", "nano",
    )  # fmt: skip
    grpc_port, health_port = _port(flags, "--grpc-port"), _port(flags, "--grpc-health-port")
    proc = await _start(flags)
    try:
        await _wait_serving(health_port, timeout=20)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
            call = stub(ch).Process()
            await call.write(request_headers({"x-request-id": "in-flight"}))
            await call.write(request_body(BODY))
            await call.read()
            await call.read()  # dispatched; the model server is still answering
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            for _ in range(100):  # health leaves SERVING at once (the port closes)
                try:
                    if await _health_of(health_port, "") != health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.aio.AioRpcError:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("still SERVING after SIGTERM")
            for _ in range(100):  # the listener closes right after
                try:
                    socket.create_connection(("127.0.0.1", grpc_port), timeout=1).close()
                except ConnectionRefusedError:
                    break
                except ConnectionResetError:  # the listener is closing
                    pass
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("still accepting connections after SIGTERM")
            async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as fresh:  # no new streams
                late = stub(fresh).Process()  # (an accepted stream would never end: code() would time out)
                # refused (connection refused: UNAVAILABLE; on a loaded machine grpc core may instead
                # cancel a stream that raced the listener's close: CANCELLED); never served
                code = await asyncio.wait_for(late.code(), 5)
                assert code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
            assert proc.returncode is None  # still draining the first stream
            await call.write(response_headers(200))
            await call.write(response_body(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 1}}'))
            await call.done_writing()
            while await asyncio.wait_for(call.read(), 5) is not grpc.aio.EOF:
                pass
            assert await call.code() == grpc.StatusCode.OK
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        assert time.monotonic() - signalled < 10  # exits when the last stream ends, not at the timeout
    finally:
        await _stop(proc)
    assert proc.stderr is not None
    lines = [orjson.loads(ln) for ln in (await proc.stderr.read()).splitlines() if ln.startswith(b"{")]
    requests = [(e["request_id"], e["outcome"]) for e in lines if e.get("event") == "request"]
    assert requests == [("in-flight", "ok")]  # -v defaults to 2: one line per request
    assert all(isinstance(e["timestamp"], int) and e["timestamp"] > 1e18 for e in lines)  # nanoseconds


async def _read_until_error(call: Any) -> None:
    """Read ``call`` until it fails (the caller expects the AioRpcError). A clean end of the stream, or no
    end, fails the test: reading on after EOF returns EOF at once, and an unbounded read loop then spins
    and grows the test process (it once took the whole suite down by running out of memory)."""
    for _ in range(100):
        if await asyncio.wait_for(call.read(), 5) is grpc.aio.EOF:
            raise AssertionError(f"the stream ended without an error (status {await call.code()})")
    raise AssertionError("no error after 100 messages")


def _handshake(port: int, *, max_version: ssl.TLSVersion, ciphers: str | None = None) -> str:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = max_version
    context.set_alpn_protocols(["h2"])
    if ciphers is not None:
        context.set_ciphers(ciphers)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return f"{tls.version()} {tls.cipher()[0]}"  # type: ignore[index]


async def test_tls_min_version_and_cipher_suites_on_the_ext_proc_port(model_servers: list[str]) -> None:
    flags = _flags(model_servers, "--tls-min-version", "VersionTLS13")
    proc = await _start(flags)
    flags2 = _flags(
        model_servers, "--tls-cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "--grpc-engine", "h2"
    )
    proc2 = await _start(flags2)
    try:
        await _wait_serving(_port(flags, "--grpc-health-port"), timeout=20)
        await _wait_serving(_port(flags2, "--grpc-health-port"), timeout=20)
        port, port2 = _port(flags, "--grpc-port"), _port(flags2, "--grpc-port")
        assert _handshake(port, max_version=ssl.TLSVersion.TLSv1_3).startswith("TLSv1.3")
        with pytest.raises(ssl.SSLError):
            _handshake(port, max_version=ssl.TLSVersion.TLSv1_2)
        # the generated certificate is ECDSA; the server offers only the named suite for TLS 1.2
        assert (
            _handshake(port2, max_version=ssl.TLSVersion.TLSv1_2) == "TLSv1.2 ECDHE-ECDSA-AES256-GCM-SHA384"
        )
        with pytest.raises(ssl.SSLError):
            _handshake(port2, max_version=ssl.TLSVersion.TLSv1_2, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256")
        assert _handshake(port2, max_version=ssl.TLSVersion.TLSv1_3).startswith("TLSv1.3")  # not configurable
    finally:
        await _stop(proc)
        await _stop(proc2)


@pytest.mark.parametrize("engine", ["grpcio", "h2", "ngh2"])
async def test_metrics_over_tls_with_client_certificates_and_stream_metrics(
    model_servers: list[str], engine: str, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path)
    flags = _flags(
        model_servers, "--secure-serving=false", "--grpc-engine", engine,
        "--metrics-cert-dir", str(pki["server_dir"]), "--metrics-client-ca-file", str(pki["ca"]),
        "--enable-grpc-stream-metrics", "--grpc-max-recv-msg-size", "2Ki",
        "--emit-endpoint-scores", "--disable-endpoint-subset-filter",
    )  # fmt: skip
    proc = await _start(flags)
    url = f"https://127.0.0.1:{_port(flags, '--metrics-port')}/metrics"
    try:
        await _wait_serving(_port(flags, "--grpc-health-port"), timeout=20)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{_port(flags, '--grpc-port')}") as ch:
            ok = stub(ch).Process()
            hinted = request_headers()  # a subset hint naming no endpoint: ignored with the flag
            hinted.metadata_context.filter_metadata["envoy.lb.subset_hint"].update(
                {"x-gateway-destination-endpoint-subset": ["10.9.9.9:1"]}
            )
            await ok.write(hinted)
            await ok.write(request_body(BODY))
            routed = await ok.read()
            lb = routed.dynamic_metadata.fields["envoy.lb"].struct_value.fields
            assert lb["x-gateway-destination-endpoint"].string_value in model_servers
            scores = lb["x-gateway-destination-endpoint-scores"].struct_value.fields
            assert set(scores) == set(model_servers)
            assert all(v.number_value >= 0.0 for v in scores.values())
            ok.cancel()
            big = stub(ch).Process()  # over --grpc-max-recv-msg-size
            await big.write(request_headers())
            await big.write(request_body(b'{"model": "m1", "prompt": "' + b"x" * 4096 + b'"}'))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _read_until_error(big)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trusted = ssl.create_default_context(cafile=str(pki["ca"]))
        trusted.load_cert_chain(str(pki["client_cert"]), str(pki["client_key"]))
        # grpc.aio refuses the message in its core and only cancels the handler: counted as Canceled
        refused = "ResourceExhausted" if engine == "h2" else "Canceled"
        text = ""
        for _ in range(50):
            async with httpx.AsyncClient(verify=trusted) as http:
                text = (await http.get(url)).text
            if f'llm_d_epp_extproc_streams_total{{code="{refused}"}} 1.0' in text:
                break
            await asyncio.sleep(0.1)
        assert f'llm_d_epp_extproc_streams_total{{code="{refused}"}} 1.0' in text
        assert "llm_d_epp_extproc_streams_inflight 0.0" in text
        assert "llm_d_epp_extproc_stream_duration_seconds_count 2.0" in text
        no_cert = ssl.create_default_context(cafile=str(pki["ca"]))
        intruder = ssl.create_default_context(cafile=str(pki["ca"]))
        intruder.load_cert_chain(str(pki["other_client_cert"]), str(pki["other_client_key"]))
        for context in (no_cert, intruder):
            with pytest.raises((httpx.TransportError, ssl.SSLError)):
                async with httpx.AsyncClient(verify=context) as http:
                    await http.get(url)
        with pytest.raises(httpx.TransportError):  # plain HTTP is not served
            async with httpx.AsyncClient() as http:
                await http.get(url.replace("https", "http"))
    finally:
        await _stop(proc)


@pytest.mark.parametrize("engine", ["grpcio", "h2", "ngh2"])
async def test_send_limit_fails_the_stream_with_resource_exhausted(engine: str) -> None:
    server = make_server(FakeScheduler(), engine=engine, max_send_bytes=64, stream_metrics=True)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            call = stub(ch).Process()
            await call.write(request_headers({"x-request-id": "a-long-request-id-" + "z" * 64}))
            await call.write(request_body(b'{"model": "m1", "prompt": "hi"}'))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _read_until_error(call)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        def sample(name: str, labels: dict[str, str] | None = None) -> float | None:
            return server.registry.get_sample_value(name, labels or {})

        exhausted = ("llm_d_epp_extproc_streams_total", {"code": "ResourceExhausted"})
        for _ in range(100):
            if sample(*exhausted) == 1:
                break
            await asyncio.sleep(0.01)
        assert sample(*exhausted) == 1
        assert sample("llm_d_epp_extproc_streams_inflight") == 0
    finally:
        await server.shutdown(grace=0)


async def test_alpha_plugins_need_allow_experimental_plugins(
    model_servers: list[str], tmp_path: Path
) -> None:
    config = tmp_path / "alpha.yaml"
    config.write_text(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        "plugins:\n- type: session-affinity-scorer\n- type: max-score-picker\n"
        "schedulingProfiles:\n- name: default\n  plugins:\n"
        "  - pluginRef: session-affinity-scorer\n  - pluginRef: max-score-picker\n"
    )
    flags = _flags(model_servers, "--secure-serving=false", "--config-file", str(config))
    with pytest.raises(StartupError, match="--allow-experimental-plugins is not set"):
        await build_app(parse_options(flags))
    app = await build_app(parse_options([*flags, "--allow-experimental-plugins"]))
    await app.stop()


def _leaf_der(chain: Path) -> bytes:
    """The first certificate of a PEM chain file, DER-encoded."""
    end = "-----END CERTIFICATE-----"
    return ssl.PEM_cert_to_DER_cert(chain.read_text().split(end)[0] + end + "\n")


def _served_certificate(port: int) -> bytes:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


async def test_metrics_certificate_is_reloaded_when_the_files_change(tmp_path: Path) -> None:
    """As controller-runtime's certificate watcher: a rotated tls.crt / tls.key serves new handshakes."""
    from epp.server.http import MetricsTls

    first, second = make_pki(tmp_path / "a"), make_pki(tmp_path / "b")
    server = make_server(FakeScheduler(), metrics_tls=MetricsTls(str(first["server_dir"]), interval=0.05))
    await server.start()
    try:
        before = await asyncio.to_thread(_served_certificate, server.metrics_port)
        assert before == _leaf_der(first["cert"])
        for name in ("tls.key", "tls.crt"):  # a rotated Secret
            (first["server_dir"] / name).write_bytes((second["server_dir"] / name).read_bytes())
        after = before
        for _ in range(100):
            after = await asyncio.to_thread(_served_certificate, server.metrics_port)
            if after != before:
                break
            await asyncio.sleep(0.05)
        assert after == _leaf_der(second["cert"])
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(second["ca"]))) as http:
            assert (await http.get(f"https://127.0.0.1:{server.metrics_port}/metrics")).status_code == 200
    finally:
        await server.shutdown(grace=0)
