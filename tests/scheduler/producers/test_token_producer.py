"""token-producer: parameters, the estimate backend, render hand-over, and the prefix producer reading it.

Tables ported from llm-d-router (commit ebab68792),
pkg/epp/framework/plugins/requestcontrol/dataproducer/tokenizer/: tokenizer_test.go
(TestPluginFactory_Validation), vllm_http_test.go (TestPluginFactory_RejectsBothBackends,
TestPluginFactory_HTTPBackend_BadTimeout), estimate_test.go (TestPackBytes_KeyPreserving,
TestEstimateBackend_CompletionsDeterministic).
"""

from __future__ import annotations

from typing import Any

import pytest
from xxhash import xxh3_64_intdigest

from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.prefix.hashing import token_prefix_hashes
from scheduler.plugins.prefix.producer import ApproxPrefixCacheProducer
from scheduler.plugins.tokens.params import RenderBackend
from scheduler.plugins.tokens.producer import TokenProducer, factory, pack_bytes
from scheduler.types import Endpoint, LLMRequest, ProfileResult, SchedulingResult, ScoredEndpoint

A, B = Endpoint("10.0.0.1:8000"), Endpoint("10.0.0.2:8000")


def build(parameters: Any) -> TokenProducer:
    plugin = factory("token-producer", parameters, PluginHandle())
    assert isinstance(plugin, TokenProducer)
    return plugin


@pytest.mark.parametrize(
    ("parameters", "error"),
    [
        ({}, None),  # empty object selects estimate
        (None, None),  # nil parameters select estimate
        ({"vllm": {}}, "'modelName' must be specified"),  # render backend requires modelName
        ({"estimate": {"image": {"mode": "bogus"}}}, "estimate.image.mode must be"),
        ({"estimate": {"video": {"frames": {"mode": "x"}}}}, "estimate.video.frames.mode must be"),
        ({"estimate": {"video": {"tokensPerFrame": {"mode": "x"}}}}, "tokensPerFrame.mode must be"),
        ("{invalid}", "expected a mapping"),  # invalid JSON
        ({"estimate": {}, "vllm": {"url": "http://x"}}, "only one of"),  # RejectsBothBackends
        ({"estimate": {}, "modelName": "m"}, "only one of"),
        ({"modelName": "m", "udsTokenizerConfig": {"socketFile": "/s"}}, "only one of"),
        ({"udsTokenizerConfig": {"socketFile": "/s"}}, "not available in pyepp"),
        ({"modelName": "m", "vllm": {"timeout": "not-a-duration"}}, "vllm.timeout"),  # BadTimeout
        ({"modelName": "m", "vllm": {"mmTimeout": "5x"}}, "vllm.mmTimeout"),
        ({"modelName": "m", "vllm": {"timeout": "0s"}}, "positive duration"),
        ({"modelName": "m", "vllm": {"url": "https://r:8000"}}, "TLS is not supported"),
        ({"modelName": "m", "vllm": {"url": "http://a", "http": "http://b"}}, "differs from 'url'"),
        ({"modelName": "m", "vllm": {"grpc": "x"}}, "vllm.grpc"),
        ({"modelname": "m"}, "parameters.modelname"),
        ({"estimate": {"image": {"mode": "static", "static": {"staticToken": 8}}}}, "multimodal"),
    ],
)
def test_factory_validation(parameters: Any, error: str | None) -> None:
    if error is None:
        assert build(parameters).render is None
    else:
        with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")) as info:
            build(parameters)
        assert "token-producer" in str(info.value)


@pytest.mark.parametrize(
    ("vllm", "expected"),
    [
        (None, RenderBackend("http://localhost:8000", "m", 5.0, 30.0)),  # modelName alone selects vllm
        ({}, RenderBackend("http://localhost:8000", "m", 5.0, 30.0)),
        ({"url": "http://render:9000/"}, RenderBackend("http://render:9000", "m", 5.0, 30.0)),
        ({"http": "http://render:9000"}, RenderBackend("http://render:9000", "m", 5.0, 30.0)),  # older key
        ({"timeout": "250ms", "mmTimeout": "1m"}, RenderBackend("http://localhost:8000", "m", 0.25, 60.0)),
    ],
)
def test_vllm_backend(vllm: dict[str, str] | None, expected: RenderBackend) -> None:
    parameters: dict[str, Any] = {"modelName": "m"}
    if vllm is not None:
        parameters["vllm"] = vllm
    assert build(parameters).render == expected


def test_legacy_alias_builds_the_same_plugin() -> None:
    resolved = load_config_text(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        "plugins:\n- type: tokenizer\n  parameters: {modelName: m}\n- type: queue-scorer\n"
        "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n"
    )
    plugin = resolved.plugins[0].plugin
    assert isinstance(plugin, TokenProducer) and plugin.plugin_type == "token-producer"
    assert plugin.name == "tokenizer" and plugin.render is not None


def test_pack_bytes_is_key_preserving() -> None:
    raw = b"the quick brown fox jumps over!!"  # 32 bytes: 4-byte aligned
    tokens = pack_bytes(raw)
    assert len(tokens) == 8
    packed = b"".join(t.to_bytes(4, "little") for t in tokens)
    assert xxh3_64_intdigest(packed) == xxh3_64_intdigest(raw)
    assert pack_bytes(b"abcde") == (int.from_bytes(b"abcd", "little"), ord("e"))  # zero-padded tail
    assert pack_bytes(b"") == ()


def test_estimate_is_deterministic_and_distinguishes_prompts() -> None:
    p = build({})

    def ids(text: str) -> tuple[int, ...] | None:
        return p.tokens(
            CycleState(), LLMRequest(request_id="r", model="m", target_model="m", prompt_text=text)
        )

    assert ids("hello world") == ids("hello world")
    assert ids("hello world") != ids("hello there")
    assert ids("") is None


def test_rendered_ids_are_handed_over_once_and_bounded() -> None:
    p = build({"modelName": "m"})
    req = LLMRequest(request_id="r1", model="m", target_model="m", prompt_text="ignored")
    p.accept_rendered("r1", [1, 2, 3])
    cycle = CycleState()
    assert p.tokens(cycle, req) == (1, 2, 3)
    assert p.tokens(cycle, req) == (1, 2, 3)  # memoised in the cycle
    assert p.tokens(CycleState(), req) is None  # taken: a new cycle without a render has none
    p.accept_rendered("r1", None)  # a failed render
    assert p.tokens(CycleState(), req) is None
    for i in range(3000):
        p.accept_rendered(f"x{i}", [i])
    assert len(p._pending) == 1024
    assert p.tokens(CycleState(), LLMRequest(request_id="x2999", model="m", target_model="m")) == (2999,)
    assert p.tokens(CycleState(), LLMRequest(request_id="x0", model="m", target_model="m")) is None


def test_token_hashes_include_the_tail_block_and_respect_the_cap() -> None:
    assert len(token_prefix_hashes(list(range(130)), 7, 64, 100)) == 3  # 64 + 64 + 2
    assert len(token_prefix_hashes(list(range(130)), 7, 64, 2)) == 2
    assert token_prefix_hashes([], 7, 64, 2) == []
    a = token_prefix_hashes(list(range(128)), 7, 64, 10)
    b = token_prefix_hashes([*range(64), *range(1000, 1064)], 7, 64, 10)
    assert a[0] == b[0] and a[1] != b[1]  # chained: equal first block, different second


CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters: {modelName: m}
- type: approx-prefix-cache-producer
  parameters: {autoTune: false, blockSizeTokens: 64}
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: prefix-cache-scorer}]
"""


def routed(endpoint: Endpoint) -> SchedulingResult:
    return SchedulingResult(
        primary_profile="default",
        endpoints=(endpoint,),
        profile_results={"default": ProfileResult("default", (ScoredEndpoint(endpoint, 1.0),))},
        headers={},
    )


def test_prefix_producer_hashes_the_rendered_ids() -> None:
    resolved = load_config_text(CONFIG)
    plugins = {p.plugin.plugin_type: p.plugin for p in resolved.plugins}
    tokens, producer = plugins["token-producer"], plugins["approx-prefix-cache-producer"]
    assert isinstance(tokens, TokenProducer) and isinstance(producer, ApproxPrefixCacheProducer)
    assert producer.token_source is tokens

    def send(rid: str, ids: list[int] | None, text: str) -> dict[str, int]:
        req = LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=text)
        tokens.accept_rendered(rid, ids)
        cycle = CycleState()
        producer.prepare(cycle, req, [A, B])
        found = producer.match(cycle, req)
        producer.on_dispatched(req, routed(A))
        return {e.address: found.blocks(e.address) for e in (A, B)}

    shared = list(range(200))
    assert send("r1", shared, "text one") == {A.address: 0, B.address: 0}
    # The same ids under a different text: the ids decide (4 blocks: 64, 64, 64, 8 tokens).
    assert send("r2", shared, "other text") == {A.address: 4, B.address: 0}
    assert send("r3", [*range(128), 9, 9, 9], "x") == {A.address: 2, B.address: 0}
    # No ids (a failed render): nothing matches and nothing is recorded, as upstream.
    assert send("r4", None, "text one") == {A.address: 0, B.address: 0}


def test_without_a_token_producer_characters_are_hashed() -> None:
    resolved = load_config_text(CONFIG.replace("- type: token-producer\n  parameters: {modelName: m}\n", ""))
    producer = next(p.plugin for p in resolved.plugins if isinstance(p.plugin, ApproxPrefixCacheProducer))
    assert producer.token_source is None
    assert "token-producer" not in {p.plugin.plugin_type for p in resolved.plugins}  # never injected


LENGTH_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
%s
- type: context-length-aware
- type: inflight-load-producer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: context-length-aware}]
"""


@pytest.mark.parametrize("with_producer", [True, False])
def test_context_length_and_inflight_load_count_the_producer_ids(with_producer: bool) -> None:
    producer = "- type: token-producer\n  parameters: {modelName: m}" if with_producer else ""
    resolved = load_config_text(LENGTH_CONFIG % producer)
    plugins = {p.plugin.plugin_type: p.plugin for p in resolved.plugins}
    length, inflight = plugins["context-length-aware"], plugins["inflight-load-producer"]
    assert ("token-producer" in plugins) is with_producer  # never injected
    req = LLMRequest(request_id="r", model="m", target_model="m", prompt_text="x" * 400, token_estimate=100)
    if with_producer:
        tokens = plugins["token-producer"]
        assert isinstance(tokens, TokenProducer)
        tokens.accept_rendered("r", list(range(37)))
    cycle = CycleState()
    expected = 37 if with_producer else 100
    assert length.prompt_length(cycle, req) == expected  # type: ignore[attr-defined]
    assert inflight.uncached_tokens(cycle, req, A.address) == expected  # type: ignore[attr-defined]
    # A failed render: upstream's unknown length, 0.
    if with_producer:
        assert length.prompt_length(CycleState(), req) == 0  # type: ignore[attr-defined]
