"""Parsers declared as plugins and selected by ``requestHandler.parsers`` (and the deprecated
``parser`` section), loaded exactly as the server loads its configuration."""

from __future__ import annotations

import io

import pytest

from epp.config.sections import check_config, load_picker_config
from epp.request import InvalidRequestError, OpenAIParser, ParserChain, PassthroughParser
from epp.request.plugins import DEFAULT_PARSERS
from scheduler.errors import ConfigError

HEAD = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
"""
PROFILE = """\
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: maxScore
"""


def load(body: str) -> object:
    return load_picker_config(None, HEAD + body, source="test.yaml").parser


def chain(body: str) -> ParserChain:
    parser = load(body)
    assert isinstance(parser, ParserChain)
    return parser


def test_without_a_section_the_default_list_is_upstreams() -> None:
    parsers = chain("plugins:\n- {name: maxScore, type: max-score-picker}\n" + PROFILE).parsers
    assert tuple(p.plugin_type for p in parsers) == DEFAULT_PARSERS
    assert tuple(p.name for p in parsers) == DEFAULT_PARSERS


def test_declared_parser_is_the_chain() -> None:
    loaded = load_picker_config(
        None,
        HEAD
        + "plugins:\n- {name: maxScore, type: max-score-picker}\n- {name: p, type: openai-parser}\n"
        + PROFILE
        + "requestHandler:\n  parsers:\n  - pluginRef: p\n",
    )
    parser = loaded.parser
    assert isinstance(parser, ParserChain)
    assert parser.parsers == (loaded.config.plugin("p"),) and parser.parsers[0].name == "p"
    assert parser.parse("/v1/completions", b'{"model":"m","prompt":"x"}').model == "m"
    with pytest.raises(InvalidRequestError, match="no parser registered"):
        parser.parse("/v1/messages", b"{}")  # an explicit list gains no fallback


@pytest.mark.parametrize(
    "extra_plugins, refs, types",
    [
        # llm-d-router's parsers README examples
        ("- {name: vllmgrpcParser, type: vllmgrpc-parser}\n", ["vllmgrpcParser"], ["vllmgrpc-parser"]),
        (
            "- {name: vllmhttpParser, type: vllmhttp-parser}\n- {name: openaiParser, type: openai-parser}\n",
            ["vllmhttpParser", "openaiParser"],
            ["vllmhttp-parser", "openai-parser"],
        ),
        (
            "- {name: openaiParser, type: openai-parser}\n"
            "- {name: anthropicParser, type: anthropic-parser}\n",
            ["openaiParser", "anthropicParser"],
            ["openai-parser", "anthropic-parser"],
        ),
        ("- {name: vertexai-parser, type: vertexai-parser}\n", ["vertexai-parser"], ["vertexai-parser"]),
        ("", ["sglanghttp-parser", "passthrough-parser"], ["sglanghttp-parser", "passthrough-parser"]),
    ],
)
def test_upstream_shapes_load(extra_plugins: str, refs: list[str], types: list[str]) -> None:
    body = "plugins:\n- {name: maxScore, type: max-score-picker}\n" + extra_plugins + PROFILE
    body += "requestHandler:\n  parsers:\n" + "".join(f"  - pluginRef: {r}\n" for r in refs)
    assert [p.plugin_type for p in chain(body).parsers] == types


@pytest.mark.parametrize(
    "body, location, fragment",
    [
        (
            "requestHandler:\n  parsers:\n  - pluginRef: nope\n",
            "requestHandler.parsers[0].pluginRef",
            "undefined plugin 'nope'",
        ),
        (
            "requestHandler:\n  parsers:\n  - pluginRef: maxScore\n",
            "requestHandler.parsers[0].pluginRef",
            "not a parser plugin",
        ),
        (
            "requestHandler:\n  parsers:\n  - {pluginRef: p, weight: 1}\n",
            "requestHandler.parsers[0]",
            "'weight'",
        ),
        ("requestHandler:\n  parsers: openai-parser\n", "requestHandler.parsers", "expected a list"),
        ("requestHandler:\n  parser: []\n", "requestHandler", "unknown field 'parser'"),
        (
            "requestHandler:\n  parsers:\n  - pluginRef: ''\n",
            "requestHandler.parsers[0].pluginRef",
            "non-empty",
        ),
        ("parser:\n  pluginRef: nope\n", "parser.pluginRef", "undefined plugin 'nope'"),
        ("parser:\n  pluginRef: maxScore\n", "parser.pluginRef", "not a parser plugin"),
    ],
)
def test_bad_references_name_the_field(body: str, location: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load("plugins:\n- {name: maxScore, type: max-score-picker}\n" + PROFILE + body)
    assert info.value.location == location and fragment in info.value.message
    assert "test.yaml" in str(info.value)


def test_parser_plugins_take_no_parameters() -> None:
    with pytest.raises(ConfigError, match="takes no parameters") as info:
        load("plugins:\n- {name: p, type: anthropic-parser, parameters: {x: 1}}\n")
    assert "plugins[0]" in info.value.location


def test_deprecated_parser_plugin_ref_is_a_one_entry_list() -> None:
    parsers = chain("plugins:\n- {name: pt, type: passthrough-parser}\nparser:\n  pluginRef: pt\n").parsers
    assert [p.name for p in parsers] == ["pt"]
    parsers = chain("parser:\n  pluginRef: openai-parser\n").parsers
    assert [p.plugin_type for p in parsers] == ["openai-parser"]


def test_request_handler_wins_over_the_deprecated_parser() -> None:
    body = "parser:\n  pluginRef: passthrough-parser\n"
    body += "requestHandler:\n  parsers:\n  - pluginRef: anthropic-parser\n"
    assert [p.plugin_type for p in chain(body).parsers] == ["anthropic-parser"]


@pytest.mark.parametrize(
    "body, cls",
    [
        ("parser:\n  type: openai\n", OpenAIParser),
        ("parser:\n  type: passthrough\n", PassthroughParser),
        ("parser:\n  pluginRef: openai\n", OpenAIParser),
    ],
)
def test_legacy_type_selects_one_parser_for_every_path(body: str, cls: type) -> None:
    assert isinstance(load(body), cls)


def test_check_config_accepts_parser_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = io.StringIO(), io.StringIO()
    text = (
        HEAD
        + "plugins:\n- {name: a, type: anthropic-parser}\nrequestHandler:\n  parsers:\n  - pluginRef: a\n"
    )
    import sys

    stdin = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        assert check_config(["-"], stdout=out, stderr=err) == 0, err.getvalue()
    finally:
        sys.stdin = stdin
    assert "anthropic-parser" in out.getvalue()


def test_unnamed_parser_plugin_is_referenced_by_its_type() -> None:
    # llm-d-router's routerlib chart: ``- type: vllmgrpc-parser`` then ``pluginRef: vllmgrpc-parser``
    loaded = load_picker_config(
        None,
        HEAD
        + "plugins:\n- type: vllmgrpc-parser\nrequestHandler:\n  parsers:\n  - pluginRef: vllmgrpc-parser\n",
    )
    assert isinstance(loaded.parser, ParserChain)
    assert loaded.parser.parsers == (loaded.config.plugin("vllmgrpc-parser"),)
