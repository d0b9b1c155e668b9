"""The EndpointPickerConfig files shipped in deploy/configs/ load exactly as the server loads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from epp.config.sections import load_picker_config
from scheduler.config import DEFAULT_CONFIG_TEXT

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "deploy" / "configs").glob("*.yaml"))


def test_configs_are_shipped() -> None:
    assert {p.name for p in CONFIGS} >= {
        "tuned.yaml",
        "load-only.yaml",
        "prefix-only.yaml",
        "gie-default.yaml",
        "default.yaml",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads_and_builds_a_scheduler(path: Path) -> None:
    loaded = load_picker_config(str(path), None)
    loaded.config.build_scheduler()
    profiles = loaded.config.render()
    assert "schedulingProfiles" in profiles and "max-score-picker" in profiles


TUNED_PLUGINS = (
    "queue-scorer",
    "kv-cache-utilization-scorer",
    "prefix-cache-scorer",
    "active-request-scorer",
    "no-hit-lru-scorer",
)


def test_tuned_profile_adds_in_flight_and_cold_spread_to_gie_default() -> None:
    tuned = next(p for p in CONFIGS if p.name == "tuned.yaml")
    rendered = load_picker_config(str(tuned), None).config.render()
    assert all(plugin in rendered for plugin in TUNED_PLUGINS)


def test_default_yaml_is_the_built_in_default() -> None:
    shipped = next(p for p in CONFIGS if p.name == "default.yaml")
    assert shipped.read_text(encoding="utf-8") == DEFAULT_CONFIG_TEXT
    assert (
        load_picker_config(str(shipped), None).config.render()
        == load_picker_config(None, None).config.render()
    )


def test_check_config_without_a_file_prints_the_built_in_default() -> None:
    import io

    from epp.config.sections import check_config

    out, err = io.StringIO(), io.StringIO()
    assert check_config([], stdout=out, stderr=err) == 0, err.getvalue()
    assert out.getvalue() == load_picker_config(None, None).config.render()
    assert "type: prefix-affinity-scorer" in out.getvalue() and "weight: 10" in out.getvalue()
