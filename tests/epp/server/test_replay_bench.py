"""The capture format and stream count of ``replay_bench.py`` (the measurement itself is not a test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_bench import count_streams, read_capture

from epp.server.h2 import frames as f


def _headers(sid: int) -> bytes:
    return f.frame(f.HEADERS, f.END_HEADERS, sid, b"\x83")


def test_read_capture_returns_each_read_in_order(tmp_path: Path) -> None:
    reads = [b"abc", b"", b"x" * 70_000]
    path = tmp_path / "cap.bin"
    path.write_bytes(b"".join(len(r).to_bytes(4, "big") + r for r in reads))
    assert read_capture(path) == reads


@pytest.mark.parametrize("data", [b"\x00\x00", b"\x00\x00\x00\x05abc"])
def test_read_capture_refuses_a_truncated_file(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "cap.bin"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="truncated"):
        read_capture(path)


def test_count_streams_counts_distinct_header_streams() -> None:
    data = (
        f.PREFACE
        + f.settings({})
        + _headers(1)
        + f.frame(f.DATA, 0, 1, b"12345")
        + _headers(3)
        + f.frame(f.CONTINUATION, f.END_HEADERS, 3, b"")
        + _headers(1)  # trailers of stream 1: no new stream
        + f.window_update(0, 100)
        + _headers(5)
    )
    assert count_streams(data) == 3


def test_count_streams_needs_a_client_preface() -> None:
    with pytest.raises(ValueError, match="preface"):
        count_streams(f.settings({}))
