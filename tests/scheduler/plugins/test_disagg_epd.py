"""E/P/D stages of disagg-profile-handler, stage order, multimodal decider (llm-d's test tables)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest

from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.filters.roles import ROLE_LABEL, DecodeFilter, EncodeFilter, PrefillFilter
from scheduler.plugins.handlers import disagg
from scheduler.plugins.handlers.disagg import (
    ENCODER_HEADER,
    PEER_ENDPOINT,
    PREFILLER_HEADER,
    DisaggProfileHandler,
)
from scheduler.plugins.handlers.disagg_deciders import (
    AlwaysDisaggDecider,
    AlwaysDisaggMultimodalDecider,
    has_multimodal_content,
)
from scheduler.plugins.handlers.disagg_params import DisaggParams, parse_stage_order
from scheduler.plugins.pickers.common import PickerParams
from scheduler.plugins.pickers.max_score import MaxScorePicker
from scheduler.plugins.scorers.running_requests import RunningRequestsSizeScorer
from scheduler.profile import SchedulerProfile
from scheduler.scheduler import Scheduler
from scheduler.types import (
    ApiKind,
    Endpoint,
    EndpointView,
    LLMRequest,
    Metrics,
    ProfileResult,
    ScoredEndpoint,
)


def chat(image: bool = False, video: bool = False, audio: bool = False) -> LLMRequest:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "describe"}]
    if image:
        parts.append({"type": "image_url", "image_url": {"url": "https://x/cat.png"}})
    if video:
        parts.append({"type": "video_url", "video_url": {"url": "https://x/cat.mp4"}})
    if audio:
        parts.append({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}})
    return LLMRequest(
        request_id="r",
        model="m",
        target_model="m",
        messages=({"role": "user", "content": parts},),
        api=ApiKind.CHAT_COMPLETIONS,
        token_estimate=100,
    )


TEXT = LLMRequest(request_id="r", model="m", target_model="m", prompt_text="x" * 400, token_estimate=100)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (LLMRequest(request_id="r", model="m", target_model="m"), False),  # no body / header-only
        (TEXT, False),  # completions
        (chat(), False),  # text only
        (chat(image=True), True),
        (chat(video=True), True),
        (chat(audio=True), True),
        (chat(image=True, video=True, audio=True), True),
        (
            LLMRequest(
                request_id="r",
                model="m",
                target_model="m",
                messages=({"role": "user", "content": "image_url"},),  # a string content is text
            ),
            False,
        ),
    ],
)
def test_has_multimodal_content(request_: LLMRequest, expected: bool) -> None:
    assert has_multimodal_content(request_) is expected
    decider = AlwaysDisaggMultimodalDecider("mm")
    assert decider.should_disaggregate(CycleState(), request_, None) is expected


class Mock:
    """A profile stand-in: pick_profiles only looks at names."""

    def __init__(self, shadow: bool = False) -> None:
        self.shadow = shadow


def target(address: str) -> ProfileResult:
    return ProfileResult("x", (ScoredEndpoint(Endpoint(address), 1.0),))


class Fixed:
    plugin_type = "fixed-decider"

    def __init__(self, answer: bool) -> None:
        self.name = f"fixed-{answer}"
        self.answer = answer
        self.calls = 0

    def should_disaggregate(
        self, cycle: CycleState, request: LLMRequest, decode: EndpointView | None
    ) -> bool:
        self.calls += 1
        return self.answer


EPD = {"decode": Mock(), "prefill": Mock(), "encode": Mock()}


def pick(
    handler: DisaggProfileHandler,
    request: LLMRequest,
    results: Mapping[str, ProfileResult | None],
    profiles: Mapping[str, Any] = EPD,
    cycle: CycleState | None = None,
) -> list[str]:
    return sorted(handler.pick_profiles(cycle or CycleState(), request, profiles, results))


# llm-d TestHandler_Pick_EPD_Full (the P/D decider here answers what the prefix decider would).
@pytest.mark.parametrize(
    ("name", "request_", "prefill", "results", "want"),
    [
        ("decode not run", chat(image=True), True, {}, ["decode"]),
        ("decode failed", chat(image=True), True, {"decode": None}, []),
        ("multimodal -> encode next", chat(image=True), True, {"decode": target("1:1")}, ["encode"]),
        ("text, uncached -> skip encode, prefill", TEXT, True, {"decode": target("1:1")}, ["prefill"]),
        ("text, prefill not needed -> done", TEXT, False, {"decode": target("1:1")}, []),
        (
            "encode failed -> prefill",
            chat(image=True),
            True,
            {"decode": target("1:1"), "encode": None},
            ["prefill"],
        ),
        (
            "encode done -> prefill",
            chat(image=True),
            True,
            {"decode": target("1:1"), "encode": target("2:2")},
            ["prefill"],
        ),
        (
            "all three done",
            chat(image=True),
            True,
            {"decode": target("1:1"), "encode": target("2:2"), "prefill": target("3:3")},
            [],
        ),
    ],
)
def test_pick_epd_full(
    name: str, request_: LLMRequest, prefill: bool, results: dict[str, Any], want: list[str]
) -> None:
    handler = DisaggProfileHandler("h", Fixed(prefill), encode_decider=AlwaysDisaggMultimodalDecider("mm"))
    assert pick(handler, request_, results) == want, name


@pytest.mark.parametrize(
    ("pd", "encode", "results", "want"),
    [
        (None, None, {}, ["decode"]),
        (None, None, {"decode": target("1:1")}, []),  # both deciders nil: decode only
        (None, True, {"decode": target("1:1")}, ["encode"]),
        (None, True, {"decode": target("1:1"), "encode": target("2:2")}, []),
        (True, None, {"decode": target("1:1")}, ["prefill"]),
        (True, False, {"decode": target("1:1")}, ["prefill"]),  # encode rejected
    ],
)
def test_pick_nil_deciders(
    pd: bool | None, encode: bool | None, results: dict[str, Any], want: list[str]
) -> None:
    handler = DisaggProfileHandler(
        "h",
        Fixed(pd) if pd is not None else None,
        encode_decider=Fixed(encode) if encode is not None else None,
    )
    assert pick(handler, chat(image=True), results) == want


def test_rejected_stage_is_decided_once_per_cycle() -> None:
    encode = Fixed(False)
    handler = DisaggProfileHandler("h", Fixed(True), encode_decider=encode)
    cycle = CycleState()
    assert pick(handler, TEXT, {"decode": target("1:1")}, cycle=cycle) == ["prefill"]
    assert pick(handler, TEXT, {"decode": target("1:1"), "prefill": target("3:3")}, cycle=cycle) == []
    assert encode.calls == 1


def test_encode_profile_missing_skips_encode() -> None:
    handler = DisaggProfileHandler("h", Fixed(True), encode_decider=Fixed(True))
    profiles = {"decode": Mock(), "prefill": Mock()}
    assert pick(handler, chat(image=True), {"decode": target("1:1")}, profiles) == ["prefill"]


def test_peer_endpoint_published_before_prefill_only() -> None:
    cycle = CycleState()
    handler = DisaggProfileHandler("h", Fixed(True))
    pick(handler, TEXT, {"decode": target("1.1.1.1:8000")}, cycle=cycle)
    peer = cycle.read(PEER_ENDPOINT)
    assert peer is not None and peer.address == "1.1.1.1:8000"
    cycle = CycleState()
    pick(DisaggProfileHandler("h", Fixed(False)), TEXT, {"decode": target("1.1.1.1:8000")}, cycle=cycle)
    assert cycle.read(PEER_ENDPOINT) is None


# llm-d TestHandler_Pick_PrefillFirst_EPD_Full and _PD.
@pytest.mark.parametrize(
    ("request_", "results", "want"),
    [
        (chat(image=True), {}, ["prefill"]),
        (chat(image=True), {"prefill": target("3:3")}, ["encode"]),
        (TEXT, {"prefill": target("3:3")}, ["decode"]),
        (chat(image=True), {"prefill": target("3:3"), "encode": target("2:2")}, ["decode"]),
        (
            chat(image=True),
            {"prefill": target("3:3"), "encode": target("2:2"), "decode": target("1:1")},
            [],
        ),
        (chat(image=True), {"prefill": None}, ["encode"]),  # prefill failed
        (TEXT, {"prefill": None}, ["decode"]),
        (TEXT, {"prefill": target("3:3"), "decode": None}, []),  # decode failed
    ],
)
def test_pick_prefill_first(request_: LLMRequest, results: dict[str, Any], want: list[str]) -> None:
    params = DisaggParams(stage_order="prefill-first")
    handler = DisaggProfileHandler("h", None, params, AlwaysDisaggMultimodalDecider("mm"))
    assert pick(handler, request_, results) == want


def test_prefill_first_publishes_prefill_pick_before_decode() -> None:
    handler = DisaggProfileHandler("h", None, DisaggParams(stage_order="prefill-first"))
    cycle = CycleState()
    assert pick(
        handler, TEXT, {"prefill": target("3.3.3.3:1")}, {"decode": Mock(), "prefill": Mock()}, cycle
    ) == ["decode"]
    peer = cycle.read(PEER_ENDPOINT)
    assert peer is not None and peer.address == "3.3.3.3:1"
    cycle = CycleState()
    pick(handler, TEXT, {"prefill": None}, {"decode": Mock(), "prefill": Mock()}, cycle)
    assert cycle.read(PEER_ENDPOINT) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "decode-first"),
        ("", "decode-first"),
        ("decode-first", "decode-first"),
        ("DecodeFirst", "decode-first"),
        ("decode", "decode-first"),
        ("prefill-first", "prefill-first"),
        ("PrefillFirst", "prefill-first"),
        ("prefill_first", "prefill-first"),
    ],
)
def test_parse_stage_order(raw: str | None, expected: str) -> None:
    assert parse_stage_order(raw) == expected


def test_prefill_first_with_encode_decider_is_valid() -> None:
    handle = PluginHandle()
    handle.add(AlwaysDisaggMultimodalDecider("mm"))
    handler = disagg.factory("h", {"stageOrder": "prefill-first", "deciders": {"encode": "mm"}}, handle)
    assert isinstance(handler, DisaggProfileHandler) and handler.encode_decider is not None


def test_flat_decider_alias_has_lower_priority() -> None:
    handle = PluginHandle()
    handle.add(AlwaysDisaggDecider("a"))
    handle.add(AlwaysDisaggMultimodalDecider("mm"))
    handler = disagg.factory(
        "h",
        {
            "decodeProfile": "my-decode",
            "prefillProfile": "my-prefill",
            "encodeProfile": "my-encode",
            "prefillDeciderPluginName": "a",
            "deciderPluginName": "mm",
            "encodeDeciderPluginName": "mm",
        },
        handle,
    )
    assert isinstance(handler, DisaggProfileHandler)
    assert handler.decider is not None and handler.decider.name == "a"
    assert handler.encode_decider is not None and handler.encode_decider.name == "mm"
    assert (handler.params.decode, handler.params.prefill, handler.params.encode) == (
        "my-decode",
        "my-prefill",
        "my-encode",
    )


# -- a whole cycle through the Scheduler, with the headers --------------------------------------------

D1 = Endpoint("10.0.0.1:8000", labels={ROLE_LABEL: "decode"}, metrics=Metrics(running_requests=1))
P1 = Endpoint("10.0.1.1:8000", labels={ROLE_LABEL: "prefill"})
E1 = Endpoint("10.0.2.1:8000", labels={ROLE_LABEL: "encode"}, metrics=Metrics(running_requests=3))
E2 = Endpoint("10.0.2.2:8000", labels={ROLE_LABEL: "encode"})


def real_profile(name: str, filter_: Any, max_endpoints: int = 1) -> SchedulerProfile:
    picker = MaxScorePicker("p", PickerParams(max_num_of_endpoints=max_endpoints), random.Random(0))
    return SchedulerProfile(name, [filter_], [(RunningRequestsSizeScorer("s"), 1.0)], picker)


def test_epd_cycle_sets_encoder_and_prefiller_headers() -> None:
    profiles = {
        "decode": real_profile("decode", DecodeFilter("d")),
        "prefill": real_profile("prefill", PrefillFilter("p")),
        "encode": real_profile("encode", EncodeFilter("e"), max_endpoints=2),
    }
    handler = DisaggProfileHandler(
        "h", AlwaysDisaggDecider("a"), encode_decider=AlwaysDisaggMultimodalDecider("m")
    )
    scheduler = Scheduler(profiles, handler)
    result = scheduler.schedule(chat(image=True), [D1, P1, E1, E2])
    assert result.addresses == (D1.address,)
    assert result.headers == {PREFILLER_HEADER: P1.address, ENCODER_HEADER: f"{E2.address},{E1.address}"}
    assert set(result.profile_results) == {"decode", "prefill", "encode"}
    text = scheduler.schedule(TEXT, [D1, P1, E1, E2])
    assert text.headers == {PREFILLER_HEADER: P1.address} and "encode" not in text.profile_results
    no_encoder = scheduler.schedule(chat(image=True), [D1, P1])  # encode failed: P/D goes on
    assert no_encoder.headers == {PREFILLER_HEADER: P1.address}


HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"

# llm-d-router deploy/config/sim-e-p-d-epp-config.yaml: the deciders are declared after the handler.
SIM_EPD = """
plugins:
- type: queue-scorer
- type: encode-filter
- type: prefill-filter
- type: decode-filter
- type: disagg-profile-handler
  parameters:
    deciders:
      encode: always-disagg-multimodal-decider
      prefill: prefix-based-pd-decider
- type: always-disagg-multimodal-decider
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 16
schedulingProfiles:
- name: encode
  plugins:
  - pluginRef: encode-filter
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: queue-scorer
    weight: 1
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: queue-scorer
    weight: 1
"""


def test_upstream_epd_config_loads_with_forward_references() -> None:
    resolved = load_config_text(HEAD + SIM_EPD)
    handler = resolved.handler
    assert isinstance(handler, DisaggProfileHandler)
    assert handler.decider is not None and handler.decider.plugin_type == "prefix-based-pd-decider"
    assert handler.encode_decider is not None
    assert handler.encode_decider.plugin_type == "always-disagg-multimodal-decider"
    order = [r.plugin.name for r in resolved.plugins]
    assert order.index("always-disagg-multimodal-decider") < order.index("disagg-profile-handler")


def test_circular_references_are_rejected() -> None:
    text = (
        HEAD
        + """
plugins:
- name: a
  type: no-hit-lru-scorer
  parameters: {prefixPluginName: b}
- name: b
  type: disagg-profile-handler
  parameters: {deciders: {prefill: a}}
"""
    )
    with pytest.raises(ConfigError, match=r"plugins\[0\]: circular plugin references: a -> b -> a"):
        load_config_text(text)


def test_reference_to_a_broken_plugin_reports_that_plugin() -> None:
    text = (
        HEAD
        + """
plugins:
- type: disagg-profile-handler
  parameters: {deciders: {prefill: prefix-based-pd-decider}}
- type: prefix-based-pd-decider
  parameters: {nonCachedTokens: -1}
"""
    )
    with pytest.raises(ConfigError, match=r"plugins\[1\].*nonCachedTokens"):
        load_config_text(text)
