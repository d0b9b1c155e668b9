"""The ``parser`` section of an EndpointPickerConfig file: which request parser to use.

Accepted shapes (the section is optional; absent means ``openai``)::

    parser:
      type: openai            # or: passthrough
    parser:
      pluginRef: passthrough-parser   # GIE-style reference; ``openai-parser`` / ``passthrough-parser``

``type`` and ``pluginRef`` are mutually exclusive; no other keys are allowed. :func:`validate_parser_section`
returns the parser instance; an invalid section raises :class:`ParserConfigError` (a ValueError) whose
``location`` names the offending key (e.g. ``parser.type``).

When a configuration file is loaded (:mod:`epp.config.sections`), ``parser: {pluginRef: NAME}`` with
an upstream name (a ``plugins`` entry or a parser type) is instead upstream's deprecated form of a
one-entry ``requestHandler.parsers`` list (see :mod:`epp.request.plugins`); ``type`` and the short
names ``openai`` / ``passthrough`` still select one parser for every path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epp.request.openai import OpenAIParser
from epp.request.parser import RequestParser
from epp.request.passthrough import PassthroughParser

__all__ = ["PARSERS", "ParserConfigError", "parser_by_name", "validate_parser_section"]

PARSERS: Mapping[str, type[OpenAIParser] | type[PassthroughParser]] = {
    "openai": OpenAIParser,
    "openai-parser": OpenAIParser,
    "passthrough": PassthroughParser,
    "passthrough-parser": PassthroughParser,
}


class ParserConfigError(ValueError):
    """Invalid ``parser`` section; ``location`` is the path in the document."""

    def __init__(self, message: str, location: str) -> None:
        self.message = message
        self.location = location
        super().__init__(f"{location}: {message}")


def parser_by_name(name: str) -> RequestParser:
    """The parser registered as ``name``; ValueError listing the known names otherwise."""
    try:
        return PARSERS[name]()
    except KeyError:
        raise ValueError(f"unknown parser {name!r}; expected one of {sorted(PARSERS)}") from None


def validate_parser_section(section: Any, location: str = "parser") -> RequestParser:
    """Validate the ``parser`` mapping (None = default) and return the parser it selects."""
    if section is None:
        return OpenAIParser()
    if not isinstance(section, Mapping):
        raise ParserConfigError(f"expected a mapping, got {type(section).__name__}", location)
    unknown = sorted(set(section) - {"type", "pluginRef"})
    if unknown:
        raise ParserConfigError(f"unknown field {unknown[0]!r}; expected 'type' or 'pluginRef'", location)
    if "type" in section and "pluginRef" in section:
        raise ParserConfigError("give either 'type' or 'pluginRef', not both", location)
    key = "type" if "type" in section else "pluginRef"
    if key not in section:
        raise ParserConfigError("expected 'type' (openai | passthrough)", location)
    value = section[key]
    if not isinstance(value, str) or value not in PARSERS:
        raise ParserConfigError(f"expected one of {sorted(PARSERS)}, got {value!r}", f"{location}.{key}")
    return PARSERS[value]()
