"""The parser chain (upstream's ``ParserRegistry`` test tables, llm-d-router pkg/epp/handlers)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from epp.request import InvalidRequestError, ParsedBody, ParserChain
from epp.request.plugins import DEFAULT_PARSERS, ParserRef, build_chain
from scheduler.types import ApiKind


@dataclass(frozen=True)
class FakeParser:
    name: str
    claims: tuple[str, ...]
    plugin_type: str = ""

    def __post_init__(self) -> None:
        if not self.plugin_type:
            object.__setattr__(self, "plugin_type", self.name)

    def parse(self, path: str, body: bytes) -> ParsedBody:
        return ParsedBody(api=ApiKind.OTHER, model=self.name)

    def rewrite_model(self, parsed: ParsedBody, body: bytes, target_model: str) -> bytes:
        return body


OPENAI = FakeParser("openai", ("v1/chat/completions", "v1/completions"))
ANTHROPIC = FakeParser("anthropic", ("v1/messages",))
VERTEX = FakeParser("vertex", ("PredictionService/ChatCompletions",))
PASSTHROUGH = FakeParser("passthrough", ())


@pytest.mark.parametrize(
    "path, want",
    [
        ("/v1/chat/completions", "openai"),
        ("/v1/messages", "anthropic"),
        ("/google.cloud.aiplatform.v1beta1.PredictionService/ChatCompletions", "vertex"),
        ("/google.cloud.aiplatform.v1.PredictionService/ChatCompletions", "vertex"),
        ("/v1/messages/", "anthropic"),
        ("/v1/messages?beta=true", "anthropic"),
        ("/unknown/path", None),
    ],
)
def test_resolve_by_path_suffix(path: str, want: str | None) -> None:
    chain = ParserChain([OPENAI, ANTHROPIC, VERTEX])
    if want is None:
        with pytest.raises(InvalidRequestError, match="no parser registered matching path suffix"):
            chain.resolve(path)
    else:
        assert chain.resolve(path).name == want
        assert chain.parse(path, b"").model == want


def test_first_configured_wins_on_equal_claims() -> None:
    custom = FakeParser("custom", ("v1/chat/completions",))
    assert ParserChain([OPENAI, custom]).resolve("/v1/chat/completions").name == "openai"
    assert ParserChain([custom, OPENAI]).resolve("/v1/chat/completions").name == "custom"


@pytest.mark.parametrize("path, want", [("/v1/completions", "openai"), ("/unknown/path", "passthrough")])
def test_fallback_takes_unclaimed_paths(path: str, want: str) -> None:
    assert ParserChain([OPENAI, PASSTHROUGH]).resolve(path).name == want


@pytest.mark.parametrize("path, want", [("/inference/v1/generate", "vllm"), ("/generate", "sglang")])
def test_longest_suffix_wins_regardless_of_order(path: str, want: str) -> None:
    chain = ParserChain([FakeParser("sglang", ("generate",)), FakeParser("vllm", ("inference/v1/generate",))])
    assert chain.resolve(path).name == want


def test_duplicate_type_is_skipped() -> None:
    first = FakeParser("openai", ("v1/chat/completions",))
    second = FakeParser("openai", ("v1/completions",))
    chain = ParserChain([first, second])
    assert chain.parsers == (first,)
    with pytest.raises(InvalidRequestError):
        chain.resolve("/v1/completions")


def test_parsers_after_the_fallback_are_never_used() -> None:
    chain = ParserChain([PASSTHROUGH, OPENAI])
    assert chain.parsers == (PASSTHROUGH,)
    assert chain.resolve("/v1/completions").name == "passthrough"


def test_empty_path_is_read_as_completions() -> None:
    assert ParserChain([OPENAI]).resolve("").name == "openai"


def test_empty_chain_is_refused() -> None:
    with pytest.raises(ValueError, match="no parsers"):
        ParserChain([])


@pytest.mark.parametrize(
    "path, want",
    [
        ("/v1/chat/completions", "openai-parser"),
        ("/v1/completions/render", "openai-parser"),
        ("/v1/images/generations", "openai-parser"),
        ("/v1/messages", "anthropic-parser"),
        ("/v1/messages/count_tokens", "anthropic-parser"),
        ("/inference/v1/generate", "vllmhttp-parser"),
        ("/generate", "passthrough-parser"),  # sglanghttp is not in the default list
        ("/v1/models", "passthrough-parser"),
    ],
)
def test_default_chain_is_upstreams(path: str, want: str) -> None:
    chain = build_chain((), lambda name: None)
    assert tuple(p.plugin_type for p in chain.parsers) == DEFAULT_PARSERS
    assert chain.resolve(path).plugin_type == want


def test_build_chain_uses_declared_instances() -> None:
    declared = FakeParser("mine", ("v1/messages",), plugin_type="anthropic-parser")
    chain = build_chain(
        (ParserRef("mine", declared=True), ParserRef("passthrough-parser", declared=False)),
        {"mine": declared}.__getitem__,
    )
    assert chain.resolve("/v1/messages") is declared
    assert chain.resolve("/v1/chat/completions").plugin_type == "passthrough-parser"


def test_resolved_paths_are_remembered_within_a_bound() -> None:
    from epp.request import chain as chain_module

    chain = build_chain((), lambda name: None)
    first = chain.resolve("/v1/chat/completions")
    assert chain.resolve("/v1/chat/completions") is first  # remembered answer = the scanned one
    for i in range(3 * chain_module._RESOLVED_LIMIT):  # a client inventing paths cannot grow it
        assert chain.resolve(f"/x{i}/v1/completions").plugin_type == "openai-parser"
    assert len(chain._resolved) <= chain_module._RESOLVED_LIMIT
    assert chain.resolve("/v1/messages").plugin_type == "anthropic-parser"
    assert chain.resolve("/v1/models").plugin_type == "passthrough-parser"  # fallback, not remembered
