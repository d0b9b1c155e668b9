"""Request parsers as plugins: their types, factories, the ``requestHandler`` section and the chain.

Parser types (upstream's names; none takes parameters):

==========================  ==========================================================  ============
type                        handles (claimed ``:path`` suffixes)                        module
==========================  ==========================================================  ============
``openai-parser``           chat/completions, completions, embeddings, responses, ...  openai
``anthropic-parser``        messages, messages/count_tokens                             anthropic
``vllmhttp-parser``         inference/v1/generate                                       vllmhttp
``sglanghttp-parser``       /generate                                                   sglang
``vllmgrpc-parser``         vllm.grpc.engine.VllmEngine/Generate, .../Embed             vllmgrpc
``vertexai-parser``         PredictionService/ChatCompletions, StreamRawPredict, ...   vertexai
``passthrough-parser``      none: the fallback                                          passthrough
==========================  ==========================================================  ============

Configuration (upstream's shape)::

    plugins:
    - {name: p, type: openai-parser}
    requestHandler:
      parsers:
      - pluginRef: p            # a plugins entry, or a parser type used with its defaults

A ``pluginRef`` names a ``plugins`` entry, which must be of a parser type; a name that is no
entry but is a parser type is instantiated with that name (as upstream does for defaults). The
list is used as given (see :class:`~epp.request.chain.ParserChain` for how a path picks a parser).
Without ``requestHandler.parsers`` the deprecated top-level ``parser: {pluginRef: ...}`` is the
list; without either, :data:`DEFAULT_PARSERS`. Errors are :class:`ParserConfigError` naming the
field (``requestHandler.parsers[1].pluginRef``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epp.request.anthropic import ANTHROPIC_PARSER_TYPE, AnthropicParser
from epp.request.chain import ParserChain
from epp.request.config import ParserConfigError
from epp.request.openai import OPENAI_PARSER_TYPE, OpenAIParser
from epp.request.parser import ParserPlugin
from epp.request.passthrough import PASSTHROUGH_PARSER_TYPE, PassthroughParser
from epp.request.sglang import SGLANG_PARSER_TYPE, SGLangHTTPParser
from epp.request.vertexai import VERTEXAI_PARSER_TYPE, VertexAIParser
from epp.request.vllmgrpc import VLLMGRPC_PARSER_TYPE, VllmGRPCParser
from epp.request.vllmhttp import VLLMHTTP_PARSER_TYPE, VllmHTTPParser
from scheduler.errors import ConfigError
from scheduler.params import plugin_location

__all__ = [
    "DEFAULT_PARSERS",
    "PARSER_TYPES",
    "ParserRef",
    "build_chain",
    "parser_factories",
    "validate_parser_ref",
    "validate_parser_refs",
    "validate_request_handler",
]

PARSER_TYPES: Mapping[str, Callable[[str], ParserPlugin]] = {
    OPENAI_PARSER_TYPE: OpenAIParser,
    ANTHROPIC_PARSER_TYPE: AnthropicParser,
    VLLMHTTP_PARSER_TYPE: VllmHTTPParser,
    SGLANG_PARSER_TYPE: SGLangHTTPParser,
    VLLMGRPC_PARSER_TYPE: VllmGRPCParser,
    VERTEXAI_PARSER_TYPE: VertexAIParser,
    PASSTHROUGH_PARSER_TYPE: PassthroughParser,
}

DEFAULT_PARSERS = (OPENAI_PARSER_TYPE, ANTHROPIC_PARSER_TYPE, VLLMHTTP_PARSER_TYPE, PASSTHROUGH_PARSER_TYPE)
"""upstream's list when none is configured (llm-d-router ``ensureParsers``): the passthrough
fallback last, so a path no other parser claims is forwarded rather than refused."""


@dataclass(frozen=True, slots=True)
class ParserRef:
    """One entry of the parser list: ``name`` of a ``plugins`` entry (``declared``), or a parser
    type instantiated with its defaults under that name."""

    name: str
    declared: bool


def parser_factories() -> Mapping[str, Callable[[str, Mapping[str, Any], Any], ParserPlugin]]:
    """Factories ``(name, parameters, handle) -> parser`` for the plugin registry; a parser takes
    no parameters (ConfigError naming the plugin otherwise)."""

    def factory_for(plugin_type: str) -> Callable[[str, Mapping[str, Any], Any], ParserPlugin]:
        def factory(name: str, parameters: Mapping[str, Any], handle: Any) -> ParserPlugin:
            if parameters:
                raise ConfigError(
                    f"a {plugin_type} takes no parameters, got {sorted(parameters)}",
                    location=f"{plugin_location(plugin_type, name)}.parameters",
                )
            return PARSER_TYPES[plugin_type](name)

        return factory

    return {t: factory_for(t) for t in PARSER_TYPES}


def _declared_types(plugins: Sequence[Any] | None) -> dict[str, Any]:
    """Declared plugin name -> type (a plugin without a name is named after its type)."""
    found: dict[str, Any] = {}
    for entry in plugins or ():
        if isinstance(entry, Mapping):
            name = entry.get("name") if entry.get("name") is not None else entry.get("type")
            if isinstance(name, str):
                found[name] = entry.get("type")
    return found


def validate_parser_refs(value: Any, plugins: Sequence[Any] | None, location: str) -> tuple[ParserRef, ...]:
    """A list of ``{pluginRef: NAME}`` resolved against the document's ``plugins`` list."""
    if not isinstance(value, list):
        raise ParserConfigError(
            f"expected a list of {{pluginRef: NAME}}, got {type(value).__name__}", location
        )
    declared = _declared_types(plugins)
    refs: list[ParserRef] = []
    for i, item in enumerate(value):
        where = f"{location}[{i}]"
        if not isinstance(item, Mapping):
            raise ParserConfigError(f"expected a mapping with 'pluginRef', got {type(item).__name__}", where)
        unknown = sorted(set(item) - {"pluginRef"})
        if unknown:
            raise ParserConfigError(f"unknown field {unknown[0]!r}; expected 'pluginRef'", where)
        refs.append(_ref(item.get("pluginRef"), declared, f"{where}.pluginRef"))
    return tuple(refs)


def _ref(name: Any, declared: Mapping[str, Any], where: str) -> ParserRef:
    if not isinstance(name, str) or not name:
        raise ParserConfigError("expected the name of a parser plugin (a non-empty string)", where)
    if name in declared:
        if declared[name] not in PARSER_TYPES:
            raise ParserConfigError(
                f"plugin {name!r} (type {declared[name]!r}) is not a parser plugin; parser types: "
                f"{', '.join(PARSER_TYPES)}",
                where,
            )
        return ParserRef(name, declared=True)
    if name in PARSER_TYPES:
        return ParserRef(name, declared=False)
    raise ParserConfigError(
        f"parser references undefined plugin {name!r}: declare it in plugins, or name a parser type "
        f"({', '.join(PARSER_TYPES)})",
        where,
    )


def validate_request_handler(
    section: Any, plugins: Sequence[Any] | None, location: str = "requestHandler"
) -> tuple[ParserRef, ...]:
    """The ``requestHandler`` section: its ``parsers`` list (empty when absent or empty)."""
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        raise ParserConfigError(f"expected a mapping, got {type(section).__name__}", location)
    unknown = sorted(set(section) - {"parsers"})
    if unknown:
        raise ParserConfigError(f"unknown field {unknown[0]!r}; expected 'parsers'", location)
    parsers = section.get("parsers")
    if parsers is None:
        return ()
    return validate_parser_refs(parsers, plugins, f"{location}.parsers")


def validate_parser_ref(name: Any, plugins: Sequence[Any] | None, location: str) -> ParserRef:
    """One ``pluginRef`` (the deprecated top-level ``parser: {pluginRef: NAME}``)."""
    return _ref(name, _declared_types(plugins), location)


def build_chain(refs: Sequence[ParserRef], lookup: Callable[[str], object]) -> ParserChain:
    """The chain of ``refs`` (:data:`DEFAULT_PARSERS` when empty); ``lookup(name)`` returns the
    instance of a declared ``plugins`` entry."""
    parsers: list[ParserPlugin] = []
    for ref in refs or tuple(ParserRef(t, declared=False) for t in DEFAULT_PARSERS):
        if ref.declared:
            plugin = lookup(ref.name)
            if getattr(plugin, "plugin_type", None) not in PARSER_TYPES:
                raise ValueError(f"plugin {ref.name!r} is not a parser plugin")
            parsers.append(plugin)  # type: ignore[arg-type]
        else:
            parsers.append(PARSER_TYPES[ref.name](ref.name))
    return ParserChain(parsers)
