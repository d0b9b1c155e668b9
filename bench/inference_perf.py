"""The external harness: drive the stack with ``inference-perf`` (the GIE project's benchmark tool).

inference-perf 0.7.0 needs Python >= 3.12 and pulls in ~800 MB (transformers, ...), so it lives in its
own virtualenv, ``.venv-perf`` at the repository root, made with pyenv's 3.12.1 (``PERF_PYTHON``
overrides the interpreter). This module runs on the project's interpreter and only talks to that
virtualenv through subprocesses:

1. :func:`ensure_venv` creates ``.venv-perf`` and installs ``inference-perf==0.7.0`` when missing.
2. :func:`build_tokenizer` makes an offline HuggingFace tokenizer folder (a WordLevel model over the
   benchmark vocabulary, see ``bench/perf_tokenizer.py``); the simulators load the same folder
   (``epp-sim --tokenizer DIR``) so the server's ``usage.prompt_tokens`` (which inference-perf prefers
   over its own count) agrees with the client: the run reports ``token_count_mismatches``.
3. :func:`write_config` writes an inference-perf config for its ``shared_prefix`` data generator
   (inference-perf rejects unknown keys, so only documented keys are used).
4. :func:`run_inference_perf` runs it with ``HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1``; reports land in
   ``storage.local_storage.path``.
5. :func:`read_summary` extracts the headline figures from ``summary_lifecycle_metrics.json`` and
   :func:`fold_into_report` appends them as a section to one of our reports.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.scenarios import MODEL, SCENARIOS, Scenario, sim_args, smoke
from epp.config.flags import ManualHelpFormatter
from simulator.workloads import VOCAB

__all__ = [
    "PERF_HEADER",
    "PERF_VERSION",
    "PerfFigures",
    "PerfLoad",
    "build_tokenizer",
    "ensure_venv",
    "fold_into_report",
    "load_for",
    "read_summary",
    "run_inference_perf",
    "write_config",
]

PERF_VERSION = "0.7.0"
ROOT = Path(__file__).resolve().parents[1]
PERF_VENV = ROOT / ".venv-perf"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _python312() -> str:
    explicit = os.environ.get("PERF_PYTHON")
    if explicit:
        return explicit
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
        candidate = Path(root) / "versions" / "3.12.1" / "bin" / "python3"
        if candidate.exists():
            return str(candidate)
    except (OSError, subprocess.CalledProcessError):
        pass
    found = shutil.which("python3.13") or shutil.which("python3.12")
    if found is None:
        raise RuntimeError("inference-perf needs Python >= 3.12: set PERF_PYTHON to such an interpreter")
    return found


def ensure_venv(venv: Path = PERF_VENV, log: Any = sys.stderr) -> Path:
    """The inference-perf executable, installing it into ``venv`` first when needed."""
    exe = venv / "bin" / "inference-perf"
    if exe.exists():
        return exe
    print(f"creating {venv} with inference-perf {PERF_VERSION} (one-off, ~800 MB) ...", file=log, flush=True)
    subprocess.run([_python312(), "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, f"inference-perf=={PERF_VERSION}"], check=True)
    return exe


def build_tokenizer(out_dir: Path, venv: Path = PERF_VENV) -> Path:
    """Write the offline tokenizer folder (``tokenizer.json`` + config) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    words = out_dir / "words.txt"
    words.write_text("\n".join(VOCAB) + "\n")
    script = Path(__file__).with_name("perf_tokenizer.py")
    subprocess.run(
        [str(venv / "bin" / "python"), str(script), str(out_dir), str(words)],
        check=True,
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
    )
    if not (out_dir / "tokenizer.json").exists():
        raise RuntimeError(f"tokenizer build did not produce {out_dir / 'tokenizer.json'}")
    return out_dir


@dataclass(frozen=True, slots=True)
class PerfLoad:
    """The shared-prefix data and load of one inference-perf run."""

    groups: int = 8
    prompts_per_group: int = 8
    system_prompt_len: int = 600
    question_len: int = 60
    output_len: int = 32
    rate: float = 8.0
    duration_s: int = 30
    load_type: str = "poisson"  # constant | poisson


def write_config(
    path: Path, *, base_url: str, model: str, tokenizer_dir: Path, report_dir: Path, load: PerfLoad
) -> dict[str, Any]:
    """Write the inference-perf YAML config to ``path`` and return it."""
    config: dict[str, Any] = {
        "api": {"type": "completion", "streaming": True},
        "data": {
            "type": "shared_prefix",
            "shared_prefix": {
                "num_groups": load.groups,
                "num_prompts_per_group": load.prompts_per_group,
                "system_prompt_len": load.system_prompt_len,
                "question_len": load.question_len,
                "output_len": load.output_len,
            },
        },
        "load": {"type": load.load_type, "stages": [{"rate": load.rate, "duration": load.duration_s}]},
        "server": {"type": "vllm", "model_name": model, "base_url": base_url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer_dir)},
        "storage": {"local_storage": {"path": str(report_dir)}},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def run_inference_perf(config: Path, *, exe: Path, log_path: Path, timeout_s: float) -> None:
    """Run inference-perf on ``config``; raise with the tail of its log when it fails."""
    with log_path.open("wb") as log:
        proc = subprocess.run(
            [str(exe), "-c", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **OFFLINE_ENV},
            cwd=config.parent,
            timeout=timeout_s,
        )
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"inference-perf exited {proc.returncode}; log tail:\n{tail}")


@dataclass(frozen=True, slots=True)
class PerfFigures:
    requests: int
    failures: int
    ttft_p50: float
    ttft_p90: float
    ttft_p99: float
    itl_p50: float
    e2e_p90: float
    output_tps: float
    rps: float
    token_count_mismatches: int

    def row(self, label: str) -> str:
        def ms(v: float) -> str:
            return "-" if math.isnan(v) else f"{v * 1000:.0f}"

        return (
            f"| {label} | {self.requests} | {self.failures} | {ms(self.ttft_p50)} | {ms(self.ttft_p90)} | "
            f"{ms(self.ttft_p99)} | {ms(self.itl_p50)} | {ms(self.e2e_p90)} | {self.output_tps:.0f} | "
            f"{self.rps:.2f} | {self.token_count_mismatches} |"
        )


PERF_HEADER = (
    "| run | requests | failures | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | ITL p50 ms | e2e p90 ms "
    "| out tok/s | req/s | token mismatches |\n" + "|" + "---|" * 11
)


def _q(stats: Mapping[str, Any] | None, key: str) -> float:
    if not stats or stats.get(key) is None:
        return math.nan
    return float(stats[key])


def read_summary(report_dir: Path) -> PerfFigures:
    """Headline figures from inference-perf's ``summary_lifecycle_metrics.json``."""
    path = report_dir / "summary_lifecycle_metrics.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: did inference-perf run and write its reports there?")
    doc = json.loads(path.read_text())
    ok = doc.get("successes") or {}
    lat = ok.get("latency") or {}
    thr = ok.get("throughput") or {}
    return PerfFigures(
        requests=int((doc.get("load_summary") or {}).get("count") or 0),
        failures=int((doc.get("failures") or {}).get("count") or 0),
        ttft_p50=_q(lat.get("time_to_first_token"), "median"),
        ttft_p90=_q(lat.get("time_to_first_token"), "p90"),
        ttft_p99=_q(lat.get("time_to_first_token"), "p99"),
        itl_p50=_q(lat.get("inter_token_latency"), "median"),
        e2e_p90=_q(lat.get("request_latency"), "p90"),
        output_tps=float(thr.get("output_tokens_per_sec") or 0.0),
        rps=float(thr.get("requests_per_sec") or 0.0),
        token_count_mismatches=int(ok.get("token_count_mismatches") or 0),
    )


def fold_into_report(report_md: Path, rows: Mapping[str, PerfFigures], note: str = "") -> None:
    """Append an "External harness: inference-perf" section to ``report_md`` (created if missing)."""
    parts = ["", "## External harness: inference-perf", ""]
    if note:
        parts += [note, ""]
    parts.append(PERF_HEADER)
    parts += [fig.row(label) for label, fig in rows.items()]
    existing = report_md.read_text() if report_md.exists() else "# Benchmark report\n"
    report_md.write_text(existing.rstrip("\n") + "\n" + "\n".join(parts))


def load_for(scenario: Scenario, duration_s: int | None = None) -> PerfLoad:
    """inference-perf's shared_prefix data and rate sized like one of our routing scenarios.

    The rate is in real requests/s (the scenario's simulated rate x its time scale); by default the
    duration covers the scenario's number of prompts once.
    """
    p = scenario.params
    rate = p.rate * scenario.time_scale
    total = p.groups * p.prompts_per_group
    return PerfLoad(
        groups=p.groups,
        prompts_per_group=p.prompts_per_group,
        system_prompt_len=p.system_tokens,
        question_len=p.question_tokens,
        output_len=p.output_tokens,
        rate=rate,
        duration_s=duration_s or max(1, round(total / rate)),
    )


def _run_router(
    label: str, spec_kwargs: Mapping[str, Any], *, exe: Path, tokenizer: Path, out: Path, load: PerfLoad,
    scenario: Scenario,
) -> PerfFigures:  # fmt: skip
    from devtools.stack import Stack, StackSpec

    spec = StackSpec(servers=4, sim_args=(*sim_args(scenario), "--tokenizer", str(tokenizer)), **spec_kwargs)
    run_dir = out / label
    run_dir.mkdir(parents=True, exist_ok=True)
    who = "Envoy and the picker" if spec.picker else "Envoy"
    print(f"[{label}] starting 4 simulators, {who} ...", flush=True)
    with Stack(spec, workdir=run_dir / "stack") as stack:
        config = run_dir / "inference-perf.yaml"
        reports = run_dir / "reports"
        write_config(
            config,
            base_url=stack.base_url,
            model=MODEL,
            tokenizer_dir=tokenizer,
            report_dir=reports,
            load=load,
        )
        print(f"[{label}] inference-perf: {load.duration_s}s at {load.rate} req/s ...", flush=True)
        log = run_dir / "inference-perf.log"
        run_inference_perf(config, exe=exe, log_path=log, timeout_s=load.duration_s + 600)
    return read_summary(reports)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import datetime as dt

    parser = argparse.ArgumentParser(
        formatter_class=ManualHelpFormatter,
        prog="epp-bench inference-perf",
        description="Run inference-perf (shared_prefix data, sized like our shared-prefix routing scenario) "
        "through Envoy + picker and Envoy round-robin over simulated vLLM servers, and fold its summary "
        "into a report.",
    )
    parser.add_argument("--out", type=Path, help="output folder (default bench/results/<date>)")
    parser.add_argument("--report", type=Path, help="report to append to (default OUT/report.md)")
    parser.add_argument("--duration", type=int, help="seconds of load (default every prompt once)")
    parser.add_argument("--quick", action="store_true", help="the small smoke-sized scenario")
    args = parser.parse_args(argv)
    scenario = SCENARIOS["shared-prefix"]
    if args.quick:
        scenario = smoke(scenario)
    load = load_for(scenario, args.duration)
    out = (args.out or ROOT / "bench" / "results" / dt.date.today().isoformat()).resolve()
    raw = out / "raw" / "inference-perf"
    exe = ensure_venv()
    tokenizer = build_tokenizer(raw / "tokenizer")
    common: dict[str, Any] = {
        "exe": exe,
        "tokenizer": tokenizer,
        "out": raw,
        "load": load,
        "scenario": scenario,
    }
    rows = {
        "picker (GIE default config)": _run_router("picker", {"envoy_variant": "gie-fail-closed"}, **common),
        "Envoy round-robin": _run_router(
            "round-robin", {"picker": False, "envoy_variant": "round-robin"}, **common
        ),
    }
    note = (
        f"inference-perf {PERF_VERSION}, `shared_prefix` data ({load.groups} groups x "
        f"{load.prompts_per_group} prompts, {load.system_prompt_len}+{load.question_len} tokens -> "
        f"{load.output_len}), {load.load_type} {load.rate:g} req/s for {load.duration_s} s, 4 x epp-sim "
        f"as in our `{scenario.name}` scenario (8b-h100, one prefill at a time, time-scale "
        f"{scenario.time_scale:g}), offline WordLevel tokenizer shared by client and servers. "
        "Command: `epp-bench inference-perf`."
    )
    report = args.report or out / "report.md"
    fold_into_report(report, rows, note)
    print(PERF_HEADER)
    for label, fig in rows.items():
        print(fig.row(label))
    print(f"folded into {report}")
    return 0
