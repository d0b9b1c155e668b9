"""``epp check-config`` on files, the built-in default and bad input (the resolved form and its errors).

Moved here from tests/scheduler when the scheduler's duplicate ``check-config`` was removed: the real
one is :func:`epp.config.sections.check_config`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from epp.config.sections import check_config

CONFIGS = Path(__file__).parents[2] / "scheduler" / "configs"
HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"


def test_check_config_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_config([str(CONFIGS / "gie-default.yaml")]) == 0
    out = capsys.readouterr().out
    assert "pluginRef: prefix-cache-scorer" in out and "weight: 3.0" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(HEAD + "plugins:\n- type: no-such-plugin\n")
    assert check_config([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'error: {bad}: plugins[0].type: unknown plugin type "no-such-plugin"')
    assert check_config([str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read configuration file" in capsys.readouterr().err
    assert check_config([]) == 0
    assert "queue-scorer" in capsys.readouterr().out
