"""The inference-perf harness's pure parts: config, summary reading, folding into a report.

Running inference-perf itself needs its own ~800 MB Python 3.12 virtualenv, so the test suite does not
run it; `epp-bench inference-perf --quick` does (see docs/bench.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from bench.inference_perf import PerfLoad, fold_into_report, read_summary, write_config


def test_config_uses_only_documented_keys(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "c.yaml", base_url="http://127.0.0.1:1", model="m", tokenizer_dir=tmp_path / "tok",
        report_dir=tmp_path / "r", load=PerfLoad(groups=3, rate=2.5, duration_s=7),
    )  # fmt: skip
    assert yaml.safe_load((tmp_path / "c.yaml").read_text()) == cfg
    assert set(cfg) == {"api", "data", "load", "server", "tokenizer", "storage"}
    assert cfg["data"]["shared_prefix"]["num_groups"] == 3
    assert cfg["load"] == {"type": "poisson", "stages": [{"rate": 2.5, "duration": 7}]}
    assert cfg["storage"]["local_storage"]["path"] == str(tmp_path / "r")


def _stats(median: float, p90: float, p99: float) -> dict[str, float]:
    return {"median": median, "p90": p90, "p99": p99}


def test_summary_is_read_and_folded(tmp_path: Path) -> None:
    summary = {
        "load_summary": {"count": 40},
        "successes": {
            "count": 39,
            "token_count_mismatches": 0,
            "latency": {
                "time_to_first_token": _stats(0.01, 0.02, 0.05),
                "inter_token_latency": _stats(0.001, 0.002, 0.003),
                "request_latency": _stats(0.1, 0.2, 0.3),
            },
            "throughput": {"output_tokens_per_sec": 123.4, "requests_per_sec": 3.5},
        },
        "failures": {"count": 1},
    }
    (tmp_path / "summary_lifecycle_metrics.json").write_text(json.dumps(summary))
    fig = read_summary(tmp_path)
    assert (fig.requests, fig.failures, fig.ttft_p90, fig.e2e_p90) == (40, 1, 0.02, 0.2)
    report = tmp_path / "report.md"
    report.write_text("# Routing benchmark report\n\nexisting\n")
    fold_into_report(report, {"picker": fig, "rr": fig}, note="a note")
    text = report.read_text()
    assert text.startswith("# Routing benchmark report") and "existing" in text
    assert "## External harness: inference-perf" in text and "a note" in text
    assert text.count("| run |") == 1 and "| picker | 40 | 1 | 10 | 20 | 50 |" in text


def test_missing_summary_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"summary_lifecycle_metrics\.json"):
        read_summary(tmp_path)


def test_absent_latency_is_nan(tmp_path: Path) -> None:
    (tmp_path / "summary_lifecycle_metrics.json").write_text(json.dumps({"load_summary": {"count": 0}}))
    assert math.isnan(read_summary(tmp_path).ttft_p50)


def test_load_is_sized_like_the_routing_scenario() -> None:
    from bench.inference_perf import load_for
    from bench.scenarios import SCENARIOS

    scenario = SCENARIOS["shared-prefix"]
    load = load_for(scenario)
    p = scenario.params
    assert (load.groups, load.prompts_per_group, load.system_prompt_len) == (
        p.groups, p.prompts_per_group, p.system_tokens,
    )  # fmt: skip
    assert load.rate == p.rate * scenario.time_scale  # real requests/s
    assert load.rate * load.duration_s == pytest.approx(p.groups * p.prompts_per_group, rel=0.1)
    assert load_for(scenario, 5).duration_s == 5
