"""Each plugin type pyepp registers that exists upstream resolves, with no parameters, to upstream's
defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from epp.config.sections import picker_registry
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.params import params_to_dict
from tests.compat.upstream_defaults import DEFAULT_MISMATCHES, NOT_UPSTREAM, REQUIRED, UPSTREAM_DEFAULTS

_MISSING = object()


def resolved_defaults(plugin_type: str) -> dict[str, Any]:
    """The parameters the plugin resolves to when built with none (as ``epp check-config`` renders them)."""
    plugin = picker_registry().create(plugin_type, plugin_type, {}, PluginHandle(0))
    params = getattr(plugin, "params", None)
    if params is not None and dataclasses.is_dataclass(params) and not isinstance(params, type):
        return params_to_dict(params)
    parameters = getattr(plugin, "parameters", None)
    return dict(parameters) if isinstance(parameters, Mapping) else {}


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    value: Any = values
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _cases() -> list[Any]:
    cases = []
    for plugin_type, upstream in sorted(UPSTREAM_DEFAULTS.items()):
        for key, default in sorted(upstream.defaults.items()):
            cases.append(pytest.param(plugin_type, key, default, id=f"{plugin_type}.{key}"))
    return cases


def test_every_registered_type_is_classified() -> None:
    registered = set(picker_registry().types())
    classified = set(UPSTREAM_DEFAULTS) | set(REQUIRED) | NOT_UPSTREAM
    assert registered - classified == set(), "add upstream's defaults (or NOT_UPSTREAM) for these types"
    assert classified - registered == set(), "these types are not registered any more"


@pytest.mark.parametrize("plugin_type", sorted(UPSTREAM_DEFAULTS))
def test_builds_without_parameters(plugin_type: str) -> None:
    resolved_defaults(plugin_type)


@pytest.mark.parametrize("plugin_type", sorted(REQUIRED))
def test_required_parameters_are_required(plugin_type: str) -> None:
    with pytest.raises(ConfigError):
        resolved_defaults(plugin_type)


@pytest.mark.parametrize(("plugin_type", "key", "default"), _cases())
def test_resolved_default_matches_upstream(plugin_type: str, key: str, default: Any) -> None:
    ours = _lookup(resolved_defaults(plugin_type), key)
    matches = (ours == default and type(ours) is not bool) or ours is default
    if (plugin_type, key) in DEFAULT_MISMATCHES:
        assert not matches, f"{plugin_type}.{key} now matches upstream: remove it from DEFAULT_MISMATCHES"
    else:
        shown = "missing" if ours is _MISSING else repr(ours)
        assert matches, (
            f"{plugin_type}.{key}: pyepp {shown}, upstream {default!r} "
            f"({UPSTREAM_DEFAULTS[plugin_type].source})"
        )


def test_mismatch_entries_name_table_parameters() -> None:
    for plugin_type, key in DEFAULT_MISMATCHES:
        assert key in UPSTREAM_DEFAULTS[plugin_type].defaults, (plugin_type, key)
