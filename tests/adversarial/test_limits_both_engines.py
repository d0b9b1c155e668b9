"""The ``--grpc-h2-*`` limits that grpc-core has an equivalent of hold on every engine (h2, ngh2,
grpcio; a real picker per engine, read with the ``h2`` package as a reference client): the
concurrent-stream limit and the header-list limit are advertised in the server's SETTINGS, and a
connection without a stream is closed after the idle timeout. (The other limits, which grpc-core has no
equivalent of, are covered on the h2 and ngh2 engines by tests/epp/server/test_server_h2_limits.py and by
the attacks in test_adversarial.py.)"""

from __future__ import annotations

import socket
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from harness import start_picker

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _server_frames(port: int, seconds: float) -> tuple[dict[int, int], bool, float]:
    """Open a connection, send the client preface, and read for up to ``seconds``: the settings the server
    sent, whether it ended the connection (GOAWAY or EOF) and when (seconds after connecting)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    settings: dict[int, int] = {}
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
        sock.sendall(conn.data_to_send())
        while time.monotonic() - start < seconds:
            sock.settimeout(max(0.05, seconds - (time.monotonic() - start)))
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                return settings, True, time.monotonic() - start
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RemoteSettingsChanged):
                    settings.update({k: v.new_value for k, v in event.changed_settings.items()})
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return settings, True, time.monotonic() - start
            if out := conn.data_to_send():
                sock.sendall(out)
    return settings, False, time.monotonic() - start


@pytest.mark.parametrize("engine", ["h2", "ngh2", "grpcio"])
def test_stream_and_header_limits_are_advertised_and_idle_connections_end(engine: str) -> None:
    flags = ("--grpc-h2-max-concurrent-streams=7", "--grpc-h2-max-header-list-size=4096",
             "--grpc-h2-idle-timeout=1s")  # fmt: skip
    with start_picker(engine, *flags) as picker:
        settings, ended, after = _server_frames(picker.port, 8.0)
        assert picker.alive
    assert settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS) == 7, settings
    assert settings.get(h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE) == 4096, settings
    assert ended, "the idle connection was not ended within 8 s (idle timeout 1 s)"
    assert 0.5 <= after <= 6.0, f"ended after {after:.1f} s (idle timeout 1 s)"
