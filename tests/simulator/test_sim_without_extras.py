"""Without the ``sim`` extra, ``epp-sim`` still serves; the options that need it fail with a clear error."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from sim_testlib import sim_config

from simulator.server import SimServer
from simulator.tokenizer import OfflineTokenizer, TokenizerError, load_tokenizer


def test_tokenizer_without_tokenizers_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers raises ImportError
    with pytest.raises(
        TokenizerError, match=r"'tokenizers' package is not installed \(pip install 'pyepp\[sim\]'\)"
    ):
        load_tokenizer(str(tmp_path))
    assert isinstance(load_tokenizer(None), OfflineTokenizer)  # the default needs no extra


@pytest.mark.parametrize("missing", ["zmq", "msgpack"])
async def test_kv_events_without_pyzmq_or_msgpack_fail_start_cleanly(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, missing, None)
    srv = SimServer(sim_config(kv_events_endpoint="tcp://127.0.0.1:*"), OfflineTokenizer())
    with pytest.raises(OSError, match=r"needs pyzmq and msgpack \(dependencies of pyepp; reinstall it\)"):
        await srv.start()
    await srv.stop()
    with socket.socket() as s:  # the HTTP port was released
        s.bind(("127.0.0.1", srv.port))
