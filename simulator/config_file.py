"""``epp-sim --config FILE``: flags from a YAML file (as llm-d-inference-sim's ``--config``).

The file is a mapping from flag names (``max-num-seqs`` or ``max_num_seqs``) to values. Each value is
parsed exactly as the flag's command-line text would be (``inter-token-latency: 12`` means 12 ms,
``"250us"`` works too); list flags take YAML lists; ``lora-modules`` entries may be mappings. Flags given
on the command line win over the file. An unknown key, a flag that cannot be set from a file or a bad
value raises :class:`~simulator.config.ConfigError` naming the file, the key and the expectation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from simulator.config import ConfigError

__all__ = ["apply_config_file"]

_NOT_IN_FILE = {"help", "config"}


def _convert(action: argparse.Action, value: Any, where: str) -> Any:
    if action.nargs in ("+", "*"):
        items = value if isinstance(value, list) else [value]
        texts = [json.dumps(v) if isinstance(v, dict) else str(v) for v in items]
        return [_one(action, t, where) for t in texts]
    if isinstance(value, (list, dict)):
        raise ConfigError(f"{where}: expected a single value, got {value!r}")
    return _one(action, str(value), where)


def _one(action: argparse.Action, text: str, where: str) -> Any:
    if action.choices is not None and text not in action.choices:
        raise ConfigError(f"{where}: expected one of {sorted(action.choices)}, got {text!r}")
    if action.type is None:
        return text
    try:
        return action.type(text)  # type: ignore[operator]
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def apply_config_file(parser: argparse.ArgumentParser, ns: argparse.Namespace, path: str) -> None:
    """Fill every flag of ``ns`` that the command line left unset from the YAML file at ``path``."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {path} is not valid YAML: {exc}") from None
    if data is None:
        return
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {path} must hold a mapping of flag names to values")
    actions = {a.dest: a for a in parser._actions if a.dest not in _NOT_IN_FILE}
    by_flag = {opt.lstrip("-").replace("-", "_"): a for a in actions.values() for opt in a.option_strings}
    for key, value in data.items():
        action = by_flag.get(str(key).replace("-", "_"))
        where = f"{path}: {key}"
        if action is None:
            raise ConfigError(f"{where}: unknown flag; expected one of {sorted(by_flag)}")
        if getattr(ns, action.dest) is None or getattr(ns, action.dest) == action.default:
            setattr(ns, action.dest, _convert(action, value, where))
