"""Strict YAML reading for configuration files.

Safe loading only (no Python object tags). Duplicate keys in a mapping are an error (PyYAML would keep
the last one silently), and syntax errors are reported with line and column. Errors are ConfigError
with ``source`` set to the file name (``<config-text>`` for inline text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scheduler.errors import ConfigError

__all__ = ["TEXT_SOURCE", "read_yaml_file", "read_yaml_text"]

TEXT_SOURCE = "<config-text>"


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"unhashable mapping key {key!r}", key_node.start_mark
                ) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml_text(text: str, source: str = TEXT_SOURCE) -> Any:
    """Parse one YAML document; an empty document is None."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"invalid YAML{where}: {exc.problem or exc}", source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None


def read_yaml_file(path: str | Path) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(f"cannot read configuration file: {reason}", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"configuration file is not UTF-8: {exc}", source=str(path)) from None
    return read_yaml_text(text, str(path))
