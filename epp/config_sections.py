"""The EPP's side of an EndpointPickerConfig: validators for the sections other parts own, and loading.

The scheduler validates its own fields (``plugins``, ``schedulingProfiles``, ``saturationDetector``);
every other top-level section is validated here, through the validator of its owner:

* ``parser``: :func:`epp.request.config.validate_parser_section` (openai | passthrough);
* ``dataLayer`` / ``data``: the data layer's validator (data sources and their extractors, engine
  metric mappings);
* ``flowControl`` and ``featureGates``: rejected with a clear message, flow control (request queueing
  with fairness) is not implemented yet. An empty ``featureGates`` list is accepted.

:func:`load_picker_config` loads ``--config-file`` / ``--config-text`` (or the default configuration)
with these validators and returns the resolved scheduler configuration plus the parser and engine
mappings the sections selected. Errors are :class:`~scheduler.errors.ConfigError` naming the file,
the path in the document and what was expected.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from datalayer.config import (
    DataLayerConfig,
    DataLayerConfigError,
    plugin_factories,
    validate_datalayer_section,
)
from epp.request.config import ParserConfigError, validate_parser_section
from epp.request.openai import OpenAIParser
from epp.request.parser import RequestParser
from scheduler.config import DEFAULT_CONFIG_TEXT, ResolvedConfig, SectionValidator, resolve_document
from scheduler.config.convert import convert_document, equivalent
from scheduler.config.loader import DEFAULT_SOURCE
from scheduler.config.yaml_io import TEXT_SOURCE, read_yaml_file, read_yaml_text
from scheduler.errors import ConfigError
from scheduler.registry import PluginRegistrationError, Registry, default_registry

__all__ = ["LoadedConfig", "check_config", "load_picker_config", "picker_registry", "section_validators"]

_NO_FLOW_CONTROL = (
    "flow control (request queueing with fairness and priority bands) is not implemented yet in pyepp; "
    "remove this section (sheddable requests are still rejected with 429 when the pool is saturated)"
)


def _parser(value: Any, location: str) -> RequestParser:
    try:
        return validate_parser_section(value, location)
    except ParserConfigError as exc:
        raise ConfigError(exc.message, location=exc.location) from None


def _flow_control(value: Any, location: str) -> Any:
    raise ConfigError(_NO_FLOW_CONTROL, location=location)


def _feature_gates(value: Any, location: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("expected a list of feature-gate names", location=location)
    for i, gate in enumerate(value):
        if gate == "flowControl":
            raise ConfigError(_NO_FLOW_CONTROL, location=f"{location}[{i}]")
        raise ConfigError(
            f"unknown feature gate {gate!r}: pyepp has no feature gates yet", location=f"{location}[{i}]"
        )
    return ()


def _data_layer(plugins: Sequence[Mapping[str, Any]] | None) -> SectionValidator:
    def validate(value: Any, location: str) -> DataLayerConfig:
        try:
            return validate_datalayer_section(value, plugins, location)
        except DataLayerConfigError as exc:
            raise ConfigError(exc.message, location=exc.location) from None

    return validate


def section_validators(
    plugins: Sequence[Mapping[str, Any]] | None = None,
) -> Mapping[str, SectionValidator]:
    """Validators of every EPP-owned section; ``plugins`` is the document's ``plugins`` list (the
    data layer resolves its ``pluginRef`` entries against it)."""
    data_layer = _data_layer(plugins)
    return {
        "parser": _parser,
        "dataLayer": data_layer,
        "data": data_layer,
        "flowControl": _flow_control,
        "featureGates": _feature_gates,
    }


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """The resolved configuration and what its EPP sections selected."""

    config: ResolvedConfig
    parser: RequestParser
    data_layer: DataLayerConfig  # the dataLayer section (the default sources when absent)


def picker_registry() -> Registry:
    """The scheduler's plugins (in-tree and entry points) plus the data layer's plugin types, so
    ``plugins`` entries such as ``metrics-data-source`` validate like every other plugin."""
    registry = default_registry()
    for plugin_type, factory in plugin_factories().items():
        registry.register(plugin_type, factory, origin="datalayer")
    return registry


def load_picker_config(
    path: str | None, text: str | None, *, seed: int = 0, source: str | None = None
) -> LoadedConfig:
    """Load the file, the text, or (neither given) the default configuration."""
    if path is not None:
        raw, where = read_yaml_file(path), path
    elif text is not None:
        where = source or TEXT_SOURCE
        raw = read_yaml_text(text, where)
    else:
        raw, where = read_yaml_text(DEFAULT_CONFIG_TEXT, DEFAULT_SOURCE), DEFAULT_SOURCE
    return _load_raw(raw, where, seed)


def _load_raw(raw: Any, where: str, seed: int = 0) -> LoadedConfig:
    plugins = raw.get("plugins") if isinstance(raw, Mapping) else None
    sections = section_validators(plugins if isinstance(plugins, list) else None)
    config = resolve_document(raw, where, registry=picker_registry(), sections=sections, seed=seed)
    parser = config.sections.get("parser") or OpenAIParser()
    data_layer = config.sections.get("dataLayer") or config.sections.get("data")
    return LoadedConfig(config, parser, data_layer or validate_datalayer_section(None))


def check_config(argv: Sequence[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``epp check-config [--to APIVERSION] [FILE | -]``: validate exactly as the server does.

    0 and the effective configuration (YAML) on stdout; 2 and ``error: <file>: <location>: <message>``
    on stderr for an invalid configuration or command line. No FILE: the default configuration.
    With ``--to``, the document converted to that apiVersion is printed instead (see
    :mod:`scheduler.config.convert`), after checking that it loads and resolves to the same
    configuration as the input.
    """
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = list(argv)
    to: str | None = None
    if args and args[0] == "--to":
        if len(args) < 2 or args[1].startswith("-"):
            print(f"usage: {_USAGE}", file=err)
            return 2
        to, args = args[1], args[2:]
    if len(args) > 1 or (args and args[0].startswith("-") and args[0] != "-"):
        print(f"usage: {_USAGE}", file=err)
        return 2
    try:
        if not args:
            raw, where = read_yaml_text(DEFAULT_CONFIG_TEXT, DEFAULT_SOURCE), DEFAULT_SOURCE
        elif args[0] == "-":
            raw, where = read_yaml_text(sys.stdin.read(), "<stdin>"), "<stdin>"
        else:
            raw, where = read_yaml_file(args[0]), args[0]
        loaded = _load_raw(raw, where)
        if to is None:
            out.write(loaded.config.render())
            return 0
        converted = convert_document(raw, loaded.config, to)
        text = yaml.safe_dump(converted, sort_keys=False, default_flow_style=False)
        again = _load_raw(read_yaml_text(text, f"{where} (converted)"), f"{where} (converted)")
        difference = equivalent(loaded.config, again.config)
        if difference is not None:
            raise ConfigError(f"the converted document does not mean the same: {difference}", location="--to")
    except (ConfigError, PluginRegistrationError) as exc:
        print(f"error: {exc}", file=err)
        return 2
    out.write(f"# converted from {loaded.config.api_version} by epp check-config --to {to}\n{text}")
    return 0


_USAGE = "epp check-config [--to APIVERSION] [FILE | -]"
