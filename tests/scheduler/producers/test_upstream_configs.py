"""Real upstream files of the producer model load with the expected wiring, and ``check-config --to``
converts between the apiVersions without changing what the configuration means.

The files under ``upstream/`` are copies (header: repository, path, commit) of configs from
llm-d-router, llm-d-inference-scheduler and GIE's last commit with the EPP. The round trip runs on
every file of ``upstream/``, ``deploy/configs/`` and ``tests/scheduler/configs/``: convert, reload,
compare the resolved configuration and replay the same requests through both schedulers.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from epp.config.sections import check_config, load_picker_config
from scheduler.config.convert import equivalent
from scheduler.config.document import API_VERSION, LEGACY_API_VERSION
from scheduler.config.resolved import ResolvedConfig
from scheduler.plugins.prefix.scorer import PrefixCacheScorer
from scheduler.types import Endpoint, LLMRequest, Metrics

ROOT = Path(__file__).resolve().parents[3]
UPSTREAM = Path(__file__).parent / "upstream"
FILES = sorted(
    [
        *UPSTREAM.glob("*.yaml"),
        *(ROOT / "deploy/configs").glob("*.yaml"),
        *(ROOT / "tests/scheduler/configs").glob("*.yaml"),
    ]
)


def load(path: Path) -> ResolvedConfig:
    return load_picker_config(str(path), None).config


# file -> {prefix-cache-scorer name: producer name or None (self-contained)}, implicit producers
WIRING = {
    "router-sim-epp-config.yaml": ({"prefix-cache-scorer": "approx-prefix-cache-producer"}, set()),
    "router-pd-epp-config.yaml": ({"prefix-cache-scorer": "approx-prefix-cache-producer"}, set()),
    "router-sim-pd-epp-config.yaml": ({"prefix-cache-scorer": "approx-prefix-cache-producer"}, set()),
    "router-optimized-baseline.yaml": ({"prefix-cache-scorer": "approx-prefix-cache-producer"}, set()),
    "router-epp-config.yaml": (
        {"prefix-cache-scorer": "approx-prefix-cache-producer"},
        {"approx-prefix-cache-producer"},
    ),
    "router-epp-estimate-prefix-cache-config.yaml": (
        {"prefix-cache-scorer": "approx-prefix-cache-producer"},
        {"approx-prefix-cache-producer"},
    ),
    "scheduler-pd-epp-config.yaml": ({"prefix-cache-scorer": None}, set()),  # index parameters
    "router-integration-default-config.yaml": ({"prefix-cache-scorer": None}, set()),  # legacy apiVersion
    "gie-inferencepool-e2e.yaml": ({"prefix-cache-scorer": None}, set()),
}


@pytest.mark.parametrize("name", sorted(WIRING))
def test_upstream_file_loads_with_the_expected_wiring(name: str) -> None:
    resolved = load(UPSTREAM / name)
    expected, implicit = WIRING[name]
    for scorer_name, producer in expected.items():
        scorer = resolved.plugin(scorer_name)
        assert isinstance(scorer, PrefixCacheScorer)
        assert (scorer.producer.name if scorer.producer else None) == producer
    producers = {
        r.plugin.name for r in resolved.plugins if r.implicit and r.plugin.plugin_type.endswith("-producer")
    }
    assert producers == implicit


def test_upstream_producer_parameters_resolve() -> None:
    resolved = load(UPSTREAM / "router-sim-pd-epp-config.yaml")
    producer = resolved.plugin("approx-prefix-cache-producer")
    # blockSizeTokens 16 is raised to the 64-token floor; 16384 tokens / 64 = 256 blocks
    assert producer.block_size_tokens == 64  # type: ignore[attr-defined]
    assert producer.max_blocks() == 256  # type: ignore[attr-defined]


def convert(path: Path, to: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert check_config(["--to", to, str(path)], stdout=out, stderr=err) == 0, err.getvalue()
    return out.getvalue()


def replay(config: ResolvedConfig) -> list[str]:
    """Picks for a fixed request sequence (shared prefixes, dispatches recorded), seeded."""
    scheduler = config.build_scheduler()
    eps = [
        Endpoint(
            f"10.0.0.{i}:8000", labels={"llm-d.ai/role": "decode"}, metrics=Metrics(waiting_queue_size=i % 2)
        )
        for i in range(4)
    ]
    picks = []
    for i in range(24):
        prompt = chr(65 + i % 5) * 3000 + str(i)
        request = LLMRequest(request_id=f"r{i}", model="m", target_model="m", prompt_text=prompt)
        result = scheduler.schedule(request, eps)
        scheduler.dispatched(request, result)
        picks.append(",".join(e.address for e in result.endpoints))
    return picks


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("to", [API_VERSION, LEGACY_API_VERSION])
def test_convert_round_trip_keeps_the_meaning(path: Path, to: str, tmp_path: Path) -> None:
    text = convert(path, to)
    assert yaml.safe_load(text)["apiVersion"] == to
    target = tmp_path / "converted.yaml"
    target.write_text(text)
    before, after = load(path), load(target)
    assert after.api_version == to
    assert equivalent(before, after) is None
    assert replay(before) == replay(after)


def test_legacy_scorer_keeps_its_index_when_converted() -> None:
    text = convert(UPSTREAM / "gie-inferencepool-e2e.yaml", API_VERSION)
    doc = yaml.safe_load(text)
    scorer = next(p for p in doc["plugins"] if p["type"] == "prefix-cache-scorer")
    assert scorer["parameters"]["maxPrefixBlocksToMatch"] == 256
    assert all(p["type"] != "approx-prefix-cache-producer" for p in doc["plugins"])


def test_injected_producer_is_declared_when_converted_to_legacy() -> None:
    doc = yaml.safe_load(convert(UPSTREAM / "router-epp-config.yaml", LEGACY_API_VERSION))
    assert {"type": "approx-prefix-cache-producer", "name": "approx-prefix-cache-producer"} in doc["plugins"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--to", "v2", "FILE"], "expected one of"),
        (["--to"], "usage"),
        (["--to", API_VERSION, "a", "b"], "usage"),
    ],
)
def test_check_config_to_rejects_bad_arguments(argv: list[str], message: str) -> None:
    argv = [str(UPSTREAM / "router-epp-config.yaml") if a == "FILE" else a for a in argv]
    err = io.StringIO()
    assert check_config(argv, stdout=io.StringIO(), stderr=err) == 2
    assert message in err.getvalue()


@pytest.mark.parametrize("path", sorted(UPSTREAM.glob("*.yaml")), ids=lambda p: p.name)
def test_resolved_form_is_a_fixpoint(path: Path, tmp_path: Path) -> None:
    """check-config's resolved form (implicit producers declared) loads to the same resolved form."""
    first = load(path).render()
    again = tmp_path / "resolved.yaml"
    again.write_text(first)
    assert load(again).render() == first
