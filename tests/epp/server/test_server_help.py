"""Help that reads like a manual, errors that name their fix, each error once, logs without colour."""

from __future__ import annotations

import argparse
import importlib
import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import BENCHMARKS, Benchmark
from bench.cli import main as bench_main
from devtools.envoy_config import build_parser as envoy_config_parser
from epp.config.flags import ManualHelpFormatter, format_default
from epp.config.options import UsageError, build_parser, parse_options
from epp.config.sections import check_config
from scheduler.config import load_config_text
from scheduler.errors import ConfigError

BASE = ["--endpoints", "127.0.0.1:8000"]


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if a.option_strings and a.help is not argparse.SUPPRESS and a.dest != "help"
    ]


@pytest.mark.parametrize("parser", [build_parser(), envoy_config_parser()], ids=["epp", "envoy_config"])
def test_every_flag_has_help_ending_with_its_default_in_one_format(parser: argparse.ArgumentParser) -> None:
    formatter = ManualHelpFormatter(parser.prog)
    for action in _options(parser):
        text = formatter._get_help_string(action) or ""
        assert action.help, f"{action.option_strings[0]} has no help"
        assert text.count("(default ") == 1 and text.endswith(")"), f"{action.option_strings[0]}: {text!r}"
        assert text.rindex("(default ") > 0


@pytest.mark.parametrize("parser", [build_parser(), envoy_config_parser()], ids=["epp", "envoy_config"])
def test_help_itself_shows_no_default(parser: argparse.ArgumentParser) -> None:
    line = next(ln for ln in parser.format_help().splitlines() if ln.strip().startswith("-h, --help"))
    assert "(default" not in line, line


@pytest.mark.parametrize(
    ("parser", "least"), [(build_parser(), 8), (envoy_config_parser(), 3)], ids=["epp", "envoy_config"]
)
def test_a_shown_default_parses_back_to_the_default(parser: argparse.ArgumentParser, least: int) -> None:
    checked = 0
    for action in _options(parser):
        shown = format_default(action)
        if shown is None or not callable(action.type) or isinstance(action.default, bool):
            continue
        assert action.type(shown) == action.default, action.option_strings[0]
        checked += 1
    assert checked >= least  # ports, durations, sizes


def test_help_shows_durations_and_sizes_in_the_forms_the_flags_take() -> None:
    text = build_parser().format_help()
    assert "--max-body-bytes SIZE" in text and "(default 16MiB)" in text
    assert "--refresh-metrics-interval DURATION" in text and "(default 50ms)" in text
    assert "(default 9003)" in text and "(9003)" not in text.replace("(default 9003)", "")


@pytest.mark.parametrize("value, size", [("16MiB", 16 * 2**20), ("20MB", 20 * 10**6), ("1048576", 2**20)])
def test_max_body_bytes_takes_the_sizes_its_help_shows(value: str, size: int) -> None:
    assert parse_options([*BASE, "--max-body-bytes", value], env={}).max_body_bytes == size


@pytest.mark.parametrize(
    "typo, hint",
    [("--endpointz", "did you mean --endpoints?"), ("-grpc-prot", "did you mean --grpc-port?"),
     ("--secure-serving-x=1", "did you mean --secure-serving?")],
)  # fmt: skip
def test_an_unknown_flag_suggests_the_closest_one(typo: str, hint: str) -> None:
    with pytest.raises(UsageError, match=hint):
        parse_options([*BASE, typo], env={})


def test_an_unrelated_unknown_flag_suggests_nothing() -> None:
    with pytest.raises(UsageError) as info:
        parse_options([*BASE, "--bogus"], env={})
    assert "did you mean" not in str(info.value)


TYPOS = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-scorrer
- type: max-score-picker
  parameters:
    maxNumOfEndpoint: 2
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: queue-scorre
"""


def test_check_config_reports_every_error_of_a_file_once_with_suggestions(tmp_path: Path) -> None:
    path = tmp_path / "typos.yaml"
    path.write_text(TYPOS)
    out, err = io.StringIO(), io.StringIO()
    assert check_config([str(path)], stdout=out, stderr=err) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert all(line.startswith(f"error: {path}: ") for line in lines)
    assert (
        'plugins[0].type: unknown plugin type "prefix-cache-scorrer"; did you mean "prefix-cache-scorer"?'
        in lines[0]
    )
    assert 'parameters.maxNumOfEndpoint: unknown parameter; did you mean "maxNumOfEndpoints"?' in lines[1]
    assert 'plugins[1].pluginRef: no plugin named "queue-scorre"; did you mean "queue-scorer"?' in lines[2]


def test_a_single_error_is_a_plain_config_error_and_several_keep_the_first_location() -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(TYPOS)
    assert info.value.location == "plugins[0].type" and "(and 2 more)" in info.value.message


def test_check_config_help_exits_0() -> None:
    out = io.StringIO()
    assert check_config(["--help"], stdout=out) == 0
    assert "usage: epp check-config" in out.getvalue() and "exit status" in out.getvalue()


def test_epp_bench_help_is_aligned_and_names_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["--help"]) == 0
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("  ") and line.strip()]
    columns = {len(line) - len(line[2:].split("  ", 1)[1].lstrip()) for line in rows}
    assert len(columns) == 1, rows  # every summary starts in the same column
    for name in ("scheduler", "simulator", "datalayer", "extproc-envoy", "routing", "inference-perf", "all"):
        assert f"  {name} " in text


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _bench_parser(module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser a benchmark's ``main`` builds (caught at its parse_args call)."""

    def caught(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", caught)
    with pytest.raises(_Parsed) as parsed:
        importlib.import_module(module).main([])
    return parsed.value.parser


@pytest.mark.parametrize("bench", BENCHMARKS, ids=[b.name for b in BENCHMARKS])
def test_every_benchmark_flag_has_help_and_its_default_in_one_format(
    bench: Benchmark, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = _bench_parser(bench.module, monkeypatch)
    assert parser.prog == f"epp-bench {bench.name}"
    assert parser.formatter_class is ManualHelpFormatter
    assert "show this help message and exit\n" in parser.format_help()  # no default for -h
    formatter = ManualHelpFormatter(parser.prog)
    for action in _options(parser):
        text = formatter._get_help_string(action) or ""
        assert action.help, f"epp-bench {bench.name} {action.option_strings[0]} has no help"
        assert text.count("(default ") == 1, f"epp-bench {bench.name} {action.option_strings[0]}: {text!r}"
        shown = format_default(action)
        if shown is not None and callable(action.type) and not isinstance(action.default, bool):
            assert action.type(shown) == action.default, action.option_strings[0]  # the shown form parses


@pytest.mark.parametrize("argv", [["epp-bench", "scheduler", "--help"], ["epp-bench", "routing", "--help"],
                                  ["epp-sim", "--help"], ["epp", "check-config", "--help"]])  # fmt: skip
def test_every_command_and_subcommand_has_help(argv: list[str]) -> None:
    exe = Path(sys.executable).parent / argv[0]
    done = subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_a_malformed_config_file_is_reported_once(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: [oops\n")
    exe = Path(sys.executable).parent / "epp"
    argv = [str(exe), *BASE, "--config-file", str(bad), "--secure-serving=false",
            "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert output.count("invalid YAML") == 1, output


@pytest.mark.parametrize(
    "argv",
    [["epp-sim", "--port", "0", "--log-format", "console"],
     ["epp", *BASE, "--log-format", "console", "--secure-serving=false", "-v", "1",
      "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0"]],
    ids=["epp-sim", "epp"],
)  # fmt: skip
def test_console_logs_to_a_file_carry_no_colour_codes(tmp_path: Path, argv: list[str]) -> None:
    log = tmp_path / "out.log"
    exe = Path(sys.executable).parent / argv[0]
    with log.open("wb") as out:
        proc = subprocess.Popen([str(exe), *argv[1:]], stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not log.read_bytes().strip():
                time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(10)
    text = log.read_bytes()
    assert text.strip(), f"{argv[0]} logged nothing"
    assert b"\x1b[" not in text, text[:300]
