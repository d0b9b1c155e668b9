"""epp-sim command line: flag parsing, profiles, validation (exit 2), tokenizers, the real process."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from simulator.cli import build_configs, main, parse_args, parse_duration, parse_lora_modules, parse_ports
from simulator.config import ConfigError, LoraModule
from simulator.tokenizer import OfflineTokenizer, TokenizerError, load_tokenizer, render_chat


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("12", 0.012), ("12ms", 0.012), ("250us", 0.00025), ("1.5s", 1.5), ("0", 0.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "fast", "-3ms", "12 hours"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(bad)


def test_parse_ports() -> None:
    assert parse_ports("8000-8003") == [8000, 8001, 8002, 8003]
    assert parse_ports("8000,8005") == [8000, 8005]
    for bad in ("8003-8000", "x", "8000,8000", "70000"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_ports(bad)


def test_parse_lora_modules() -> None:
    mods = parse_lora_modules(['{"name": "a", "path": "/p/a", "base_model_name": "m"}', "b=/p/b", "c"])
    assert mods == (LoraModule("a", "/p/a", "m"), LoraModule("b", "/p/b"), LoraModule("c", "c"))
    with pytest.raises(ConfigError, match="--lora-modules"):
        parse_lora_modules(["{bad json"])


def test_profile_sets_fields_and_explicit_flags_win() -> None:
    (cfg,) = build_configs(parse_args(["--profile", "8b-h100", "--max-num-seqs", "8", "--port", "9000"]))
    assert cfg.max_num_seqs == 8
    assert cfg.inter_token_latency == pytest.approx(0.012)
    assert cfg.prefill_overhead == pytest.approx(0.030)
    assert cfg.prefill_time_per_token == pytest.approx(0.00025)
    assert cfg.time_factor_under_load == 2.0
    assert (cfg.kv_cache_size, cfg.block_size) == (1024, 16)


def test_ports_give_one_config_each_with_distinct_seeds() -> None:
    cfgs = build_configs(parse_args(["--ports", "8000-8002", "--seed", "5", "--served-model-name", "a", "b"]))
    assert [(c.port, c.seed) for c in cfgs] == [(8000, 5), (8001, 6), (8002, 7)]
    assert cfgs[0].served_names == ("a", "b") and cfgs[0].metric_model_name == "a"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--time-scale", "0"], "--time-scale"),
        (["--failure-injection-rate", "150"], "--failure-injection-rate"),
        (["--failure-types", "meteor"], "--failure-types"),
        (["--time-factor-under-load", "0.5"], "--time-factor-under-load"),
        (["--inter-token-latency", "soon"], "--inter-token-latency"),
        (["--port", "1", "--ports", "2-3"], "mutually exclusive"),
        (["--tokenizer", "/nonexistent/dir"], "--tokenizer"),
        (["--no-such-flag"], "unrecognized"),
    ],
)
def test_bad_flags_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_help_documents_units_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "a bare number is milliseconds" in out and "8b-h100" in out
    assert "KV cache size in blocks (default 1024)" in out


def test_offline_tokenizer_is_deterministic_and_splits_words_and_punctuation() -> None:
    tok = OfflineTokenizer()
    ids = tok.encode("Hello, world! Hello")
    assert len(ids) == 5 and ids[0] == ids[4] and ids[1] != ids[0]
    assert OfflineTokenizer().encode("Hello, world! Hello") == ids
    ids.append(7)  # results are fresh lists: mutating one does not poison the text memo
    assert tok.encode("Hello, world! Hello") == ids[:-1]
    text = render_chat(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"text": "hi"}]}]
    )
    assert text == "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"


def test_hf_tokenizer_json_is_loaded(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "hello": 1, "world": 2, ",": 3}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    loaded = load_tokenizer(str(tmp_path))
    assert loaded.encode("hello, world moon") == [1, 3, 2, 0]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text("{}")
    with pytest.raises(TokenizerError, match="cannot load"):
        load_tokenizer(str(tmp_path / "broken"))


def test_python_m_simulator_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    args = [
        sys.executable,
        "-m",
        "simulator",
        "--port",
        "0",
        "--log-format",
        "json",
        "--startup-duration",
        "0",
    ]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = json.loads(line)["url"]
        resp = httpx.post(url + "/v1/completions", json={"model": "meta-llama/Llama-3.1-8B-Instruct",
                                                         "prompt": "hi", "max_tokens": 2})  # fmt: skip
        assert resp.status_code == 200 and resp.json()["usage"]["prompt_tokens"] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_config_file_sets_flags_and_the_command_line_wins(tmp_path: Path) -> None:
    cfg_file = tmp_path / "sim.yaml"
    cfg_file.write_text(
        "profile: 8b-h100\nmax-num-seqs: 8\ninter_token_latency: 20\nprefill-overhead: 40ms\n"
        "served-model-name: [a, b]\nlora-modules:\n  - {name: sql-lora, path: /adapters/sql}\n  - t=/p/t\n"
    )
    (cfg,) = build_configs(parse_args(["--config", str(cfg_file), "--max-num-seqs", "4"]))
    assert cfg.max_num_seqs == 4  # command line wins
    assert cfg.inter_token_latency == pytest.approx(0.020)  # bare number: milliseconds, as on the CLI
    assert cfg.prefill_overhead == pytest.approx(0.040)
    assert cfg.prefill_time_per_token == pytest.approx(0.00025)  # from the profile named in the file
    assert cfg.served_model_names == ("a", "b")
    assert cfg.lora_modules == (LoraModule("sql-lora", "/adapters/sql"), LoraModule("t", "/p/t"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("max-num-seqz: 3\n", "max-num-seqz: unknown flag"),
        ("inter-token-latency: soon\n", "inter-token-latency: expected a duration"),
        ("profile: 70b\n", "profile: expected one of"),
        ("- a\n- b\n", "must hold a mapping"),
        ("max-num-seqs: [1, 2]\n", "expected a single value"),
        ("key: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_config_file_exits_2_naming_file_and_key(
    tmp_path: Path, content: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg_file = tmp_path / "bad.yaml"
    cfg_file.write_text(content)
    with pytest.raises(SystemExit) as exc:
        main(["--config", str(cfg_file)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "bad.yaml" in err
