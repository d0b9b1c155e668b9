"""The EPP's side of an EndpointPickerConfig: validators for the sections other parts own, and loading.

The scheduler validates its own fields (``plugins``, ``schedulingProfiles``, ``saturationDetector``);
every other top-level section is validated here, through the validator of its owner:

* ``requestHandler``: its ``parsers`` list of ``pluginRef`` entries naming parser plugins
  (:mod:`epp.request.plugins`); the deprecated ``parser: {pluginRef: NAME}`` is a one-entry list
  when ``requestHandler.parsers`` is absent, ``parser: {type: openai | passthrough}`` selects that
  one parser for every path; neither: upstream's default parser list;
* ``dataLayer`` / ``data``: the data layer's validator (data sources and their extractors, engine
  metric mappings);
* ``flowControl``: :func:`epp.flowcontrol.config.parse_flow_control` (GIE's / llm-d-router's schema);
  its policy references are resolved against the configuration's plugins once they exist
  (:func:`~epp.flowcontrol.config.resolve_flow_control`), whenever the section is present or the
  ``flowControl`` gate is on;
* ``featureGates``: :func:`epp.config.feature_gates.parse_feature_gates` (upstream's gates and ``name=false``
  syntax). ``enableLegacyMetrics`` replaces the ``dataLayer``
  section's sources with the legacy metrics-only source (flags decide path, scheme, port).

:func:`load_picker_config` loads ``--config-file`` / ``--config-text`` (or the default configuration)
with these validators and returns the resolved scheduler configuration plus the parser and engine
mappings the sections selected. Errors are :class:`~scheduler.errors.ConfigError` naming the file,
the path in the document and what was expected.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TextIO

import yaml

from datalayer.config import (
    DataLayerConfig,
    DataLayerConfigError,
    plugin_factories,
    validate_datalayer_section,
)
from epp.config.feature_gates import FLOW_CONTROL, LEGACY_METRICS, FeatureGates, parse_feature_gates
from epp.flowcontrol.config import (
    FlowControlConfig,
    FlowControlSpec,
    parse_flow_control,
    resolve_flow_control,
)
from epp.request.config import ParserConfigError, validate_parser_section
from epp.request.parser import RequestParser
from epp.request.plugins import (
    ParserRef,
    build_chain,
    parser_factories,
    validate_parser_ref,
    validate_request_handler,
)
from scheduler.config import DEFAULT_CONFIG_TEXT, ResolvedConfig, SectionValidator, resolve_document
from scheduler.config.convert import convert_document, equivalent
from scheduler.config.loader import DEFAULT_SOURCE
from scheduler.config.yaml_io import TEXT_SOURCE, read_yaml_file, read_yaml_text
from scheduler.errors import ConfigError
from scheduler.interfaces import SaturationDetector
from scheduler.registry import PluginRegistrationError, Registry, default_registry

__all__ = [
    "LoadedConfig",
    "check_config",
    "load_picker_config",
    "picker_registry",
    "section_validators",
    "with_flow_control",
]


_LEGACY = ("openai", "passthrough")  # pyepp's own names: one parser for every path, as before


def _parser(plugins: Sequence[Mapping[str, Any]] | None) -> SectionValidator:
    def validate(value: Any, location: str) -> RequestParser | tuple[ParserRef, ...]:
        try:
            if (
                isinstance(value, Mapping)
                and set(value) == {"pluginRef"}
                and value["pluginRef"] not in _LEGACY
            ):
                return (validate_parser_ref(value["pluginRef"], plugins, f"{location}.pluginRef"),)
            return validate_parser_section(value, location)
        except ParserConfigError as exc:
            raise ConfigError(exc.message, location=exc.location) from None

    return validate


def _request_handler(plugins: Sequence[Mapping[str, Any]] | None) -> SectionValidator:
    def validate(value: Any, location: str) -> tuple[ParserRef, ...]:
        try:
            return validate_request_handler(value, plugins, location)
        except ParserConfigError as exc:
            raise ConfigError(exc.message, location=exc.location) from None

    return validate


def _flow_control(value: Any, location: str) -> FlowControlSpec:
    return parse_flow_control(value, location)


def _feature_gates(value: Any, location: str) -> FeatureGates:
    return parse_feature_gates(value, location)


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
        "parser": _parser(plugins),
        "requestHandler": _request_handler(plugins),
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
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    flow_control: FlowControlConfig | None = None  # the section or the gate is present

    @property
    def saturation_detector(self) -> SaturationDetector | None:
        """``flowControl.saturationDetector`` when set (llm-d-router), else the top-level one."""
        if self.flow_control is not None and self.flow_control.detector is not None:
            return self.flow_control.detector
        return self.config.saturation_detector

    def render(self) -> str:
        """The effective configuration as YAML, the flow-control section with its defaults."""
        out = self.config.to_dict()
        if self.flow_control is not None:
            out["flowControl"] = self.flow_control.as_yaml()
        return yaml.safe_dump(out, sort_keys=False, default_flow_style=False)


def picker_registry() -> Registry:
    """The scheduler's plugins (in-tree and entry points) plus the data layer's and the request
    parsers' plugin types, so ``plugins`` entries such as ``metrics-data-source`` or
    ``openai-parser`` validate like every other plugin."""
    registry = default_registry()
    for plugin_type, factory in plugin_factories().items():
        registry.register(plugin_type, _config_errors(factory), origin="datalayer")
    for plugin_type, parser_factory in parser_factories().items():
        registry.register(plugin_type, parser_factory, origin="epp.request")
    return registry


def _selected_parser(config: ResolvedConfig) -> RequestParser:
    """``requestHandler.parsers``, else the ``parser`` section, else the default parser list."""
    legacy = config.sections.get("parser")
    refs = config.sections.get("requestHandler") or (legacy if isinstance(legacy, tuple) else ())
    if refs or legacy is None:
        return build_chain(refs, config.plugin)
    assert not isinstance(legacy, tuple)
    return legacy  # type: ignore[no-any-return]


def _config_errors(factory: Callable[[str, Mapping[str, Any], Any], Any]) -> Callable[..., Any]:
    """The factory, raising ConfigError (named plugin and parameter) for bad parameters."""

    def create(name: str, parameters: Mapping[str, Any], handle: Any) -> Any:
        try:
            return factory(name, parameters, handle)
        except DataLayerConfigError as exc:
            raise ConfigError(exc.message, location=exc.location) from None

    return create


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
    plugins = plugins if isinstance(plugins, list) else None
    sections = section_validators(plugins)
    config = resolve_document(raw, where, registry=picker_registry(), sections=sections, seed=seed)
    parser = _selected_parser(config)
    data_layer = config.sections.get("dataLayer") or config.sections.get("data")
    gates = config.sections.get("featureGates") or FeatureGates()
    if gates.enabled(LEGACY_METRICS):  # GIE's legacy polling: metrics only, set by the flags
        data_layer = DataLayerConfig(validate_datalayer_section(None).sources[:1])
    try:
        if data_layer is None:  # absent section: the defaults, with declared plugins of the default names
            data_layer = validate_datalayer_section(None, plugins)
        data_layer.endpoint_sources(config.plugin)  # its extractors must be endpoint extractors
    except DataLayerConfigError as exc:
        raise ConfigError(exc.message, location=exc.location) from None
    spec = config.sections.get("flowControl")
    flow = None
    if spec is not None or gates.enabled(FLOW_CONTROL):
        declared = tuple(p.plugin.name for p in config.plugins if not p.implicit)
        try:
            flow = resolve_flow_control(spec, config.api_version, config.plugin, declared)
        except ConfigError as exc:
            raise exc.at(source=where) from None
    return LoadedConfig(config, parser, data_layer, gates, flow)


def with_flow_control(loaded: LoadedConfig) -> LoadedConfig:
    """``loaded`` with the ``flowControl`` gate on (GIE's deprecated environment switch), the section's
    defaults resolved when the configuration has no section."""
    gates = loaded.feature_gates
    gates = FeatureGates(MappingProxyType({**gates.values, FLOW_CONTROL: True}), gates.defaults)
    flow = loaded.flow_control
    if flow is None:
        config = loaded.config
        declared = tuple(p.plugin.name for p in config.plugins if not p.implicit)
        flow = resolve_flow_control(None, config.api_version, config.plugin, declared)
    return replace(loaded, feature_gates=gates, flow_control=flow)


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
    if any(a in ("-h", "--help") for a in args):
        out.write(_HELP)
        return 0
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
            out.write(loaded.render())
            return 0
        converted = convert_document(raw, loaded.config, to)
        text = yaml.safe_dump(converted, sort_keys=False, default_flow_style=False)
        again = _load_raw(read_yaml_text(text, f"{where} (converted)"), f"{where} (converted)")
        difference = equivalent(loaded.config, again.config)
        if difference is not None:
            raise ConfigError(f"the converted document does not mean the same: {difference}", location="--to")
    except (ConfigError, PluginRegistrationError) as exc:
        for line in str(exc).splitlines():  # every error of the file, one per line
            print(f"error: {line}", file=err)
        return 2
    out.write(f"# converted from {loaded.config.api_version} by epp check-config --to {to}\n{text}")
    return 0


_USAGE = "epp check-config [--to APIVERSION] [FILE | -]"
_HELP = f"""usage: {_USAGE}

Validate an EndpointPickerConfig exactly as the server does and print it resolved (every plugin with
its parameters and defaults filled in, every profile).

arguments:
  FILE              the YAML file to check; - reads standard input; none: the built-in default
                    configuration
  --to APIVERSION   print the document converted to this apiVersion (llm-d.ai/v1alpha1 or
                    inference.networking.x-k8s.io/v1alpha1) instead, once it is shown to mean the same
  -h, --help        show this help and exit

exit status: 0 valid (the resolved or converted configuration on stdout); 2 invalid, with every
error of the file on stderr, one per line: error: FILE: LOCATION: MESSAGE
"""
