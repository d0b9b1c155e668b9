"""The ``parser`` configuration section validator."""

from __future__ import annotations

from typing import Any

import pytest

from epp.request import (
    OpenAIParser,
    ParserConfigError,
    PassthroughParser,
    parser_by_name,
    validate_parser_section,
)


@pytest.mark.parametrize(
    "section, kind",
    [
        (None, OpenAIParser),
        ({"type": "openai"}, OpenAIParser),
        ({"type": "passthrough"}, PassthroughParser),
        ({"pluginRef": "openai-parser"}, OpenAIParser),
        ({"pluginRef": "passthrough-parser"}, PassthroughParser),
    ],
)
def test_valid_sections(section: Any, kind: type) -> None:
    assert isinstance(validate_parser_section(section), kind)


@pytest.mark.parametrize(
    "section, location, fragment",
    [
        ("openai", "parser", "mapping"),
        ({}, "parser", "expected 'type'"),
        ({"type": "grpc"}, "parser.type", "expected one of"),
        ({"type": 3}, "parser.type", "expected one of"),
        ({"type": "openai", "pluginRef": "openai-parser"}, "parser", "not both"),
        ({"type": "openai", "extra": 1}, "parser", "unknown field 'extra'"),
    ],
)
def test_invalid_sections_name_the_location(section: Any, location: str, fragment: str) -> None:
    with pytest.raises(ParserConfigError) as info:
        validate_parser_section(section)
    assert info.value.location == location
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parser_by_name() -> None:
    assert isinstance(parser_by_name("passthrough"), PassthroughParser)
    with pytest.raises(ValueError, match="unknown parser"):
        parser_by_name("nope")
