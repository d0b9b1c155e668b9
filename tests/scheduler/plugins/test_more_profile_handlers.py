"""pd-profile-handler, disagg-headers-handler / prefill-header-handler, data-parallel-profile-handler
and header-profile-handler (cases from llm-d's test tables)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from scheduler.config import load_config_text
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError, NoEndpointError
from scheduler.handle import PluginHandle
from scheduler.plugins.handlers import data_parallel, disagg_headers, header_profile, pd_profile
from scheduler.plugins.handlers.data_parallel import DataParallelProfileHandler
from scheduler.plugins.handlers.disagg import DATA_PARALLEL_HEADER, ENCODER_HEADER, PREFILLER_HEADER
from scheduler.plugins.handlers.disagg_deciders import AlwaysDisaggDecider, PrefixBasedDecider
from scheduler.plugins.handlers.disagg_headers import (
    DisaggHeadersHandler,
    HeadersParams,
    PrefillHeaderHandler,
)
from scheduler.plugins.handlers.header_profile import HeaderProfileHandler, HeaderProfileParams
from scheduler.plugins.handlers.pd_profile import PdParams, PdProfileHandler
from scheduler.plugins.scorers.running_requests import RunningRequestsSizeScorer
from scheduler.types import (
    Endpoint,
    EndpointView,
    LLMRequest,
    ProfileResult,
    SchedulingResult,
    ScoredEndpoint,
)

REQ = LLMRequest(request_id="r", model="m", target_model="m", prompt_text="x" * 400, token_estimate=100)
HEAD = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"


class Mock:
    def __init__(self, shadow: bool = False) -> None:
        self.shadow = shadow


def target(*addresses: str) -> ProfileResult:
    return ProfileResult("x", tuple(ScoredEndpoint(Endpoint(a), 1.0) for a in addresses))


class Fixed:
    plugin_type = "fixed-decider"
    name = "fixed"

    def __init__(self, answer: bool) -> None:
        self.answer = answer

    def should_disaggregate(
        self, cycle: CycleState, request: LLMRequest, decode: EndpointView | None
    ) -> bool:
        return self.answer


# -- pd-profile-handler ------------------------------------------------------------------------------


def deciders() -> PluginHandle:
    handle = PluginHandle()
    handle.add(PrefixBasedDecider("prefix-based-pd-decider"))
    handle.add(AlwaysDisaggDecider("always"))
    handle.add(RunningRequestsSizeScorer("my-prefix-cache"))
    return handle


@pytest.mark.parametrize(
    ("params", "ok"),
    [
        ({}, True),  # all defaults (decider prefix-based-pd-decider)
        (
            {
                "decodeProfile": "my-decode",
                "prefillProfile": "my-prefill",
                "prefixPluginName": "my-prefix-cache",
                "primaryPort": 8080,
                "deciderPluginName": "prefix-based-pd-decider",
            },
            True,
        ),
        ({"primaryPort": 0}, True),
        ({"primaryPort": 1}, True),
        ({"primaryPort": 65535}, True),
        ({"decodeProfile": ""}, True),
        ({"prefillProfile": ""}, True),
        ({"prefixPluginName": ""}, True),
        ({"primaryPort": 65536}, False),
        ({"primaryPort": -10}, False),
        ({"primaryPort": 8080.5}, False),
        ({"deciderPluginName": "INVALID"}, False),
        ({"deciderPluginName": ""}, False),
        ({"deciderPluginName": "my-prefix-cache"}, False),  # not a decider
        ({"prefixPluginName": "missing"}, False),  # a plugin reference that must resolve
        ({"prefixPluginType": "missing"}, False),
        ({"prefixMatchInfoProducerName": "p"}, True),  # resolved when producers are wired (below)
        ({"prefixMatchInfoProducerName": 3}, False),
    ],
)
def test_pd_factory(params: dict[str, Any], ok: bool) -> None:
    if ok:
        assert isinstance(pd_profile.factory("h", params, deciders()), PdProfileHandler)
    else:
        with pytest.raises(ConfigError, match=r"\(pd-profile-handler \"h\"\): parameters\."):
            pd_profile.factory("h", params, deciders())


ROUTER_HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
PD_PRODUCER = """
plugins:
- type: approx-prefix-cache-producer
- name: warm
  type: approx-prefix-cache-producer
- type: pd-profile-handler
  parameters: {prefixMatchInfoProducerName: warm}
- type: prefix-based-pd-decider
  parameters: {nonCachedTokens: 256}
- type: max-score-picker
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: max-score-picker}]
- name: decode
  plugins: [{pluginRef: max-score-picker}]
"""


def _handler(text: str) -> PdProfileHandler:
    handler = load_config_text(text).handler
    assert isinstance(handler, PdProfileHandler)
    return handler


def test_pd_prefix_match_info_producer_name_selects_the_match_the_decider_judges() -> None:
    from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch

    handler = _handler(ROUTER_HEAD + PD_PRODUCER)
    warm = handler.producer
    assert warm is not None and warm.name == "warm"
    request = LLMRequest(request_id="r", model="m", target_model="m", token_estimate=1024)
    decode = target("10.0.0.1:8000")

    def held(blocks: int) -> PrefixMatch:  # 64 blocks of 16 tokens: the whole prompt
        return PrefixMatch(tuple(range(64)), {"10.0.0.1:8000": blocks}, 16, "p")

    for warm_blocks, want in ((64, []), (0, ["prefill"])):
        warm.match = lambda cycle, request, blocks=warm_blocks: held(blocks)  # type: ignore[method-assign]
        cycle = CycleState()
        cycle.write(PREFIX_MATCH, held(64 - warm_blocks))  # the published match says the opposite
        assert sorted(handler.pick_profiles(cycle, request, PD, {"decode": decode})) == want  # type: ignore[arg-type]


def test_pd_prefix_match_info_producer_name_wiring() -> None:
    bare = PD_PRODUCER.replace("  parameters: {prefixMatchInfoProducerName: warm}\n", "")
    bare = bare.replace(
        "- type: approx-prefix-cache-producer\n- name: warm\n  type: approx-prefix-cache-producer\n", ""
    )
    injected = _handler(ROUTER_HEAD + bare)  # upstream's default producer, created when absent
    assert injected.producer is not None and injected.producer.name == "approx-prefix-cache-producer"
    assert _handler(HEAD + bare).producer is None  # legacy apiVersion: the cycle's published match
    named = _handler(HEAD + PD_PRODUCER)
    assert named.producer is not None and named.producer.name == "warm"
    with pytest.raises(ConfigError, match=r"prefixMatchInfoProducerName"):
        load_config_text(ROUTER_HEAD + PD_PRODUCER.replace("Name: warm}", "Name: cold}"))


PD = {"decode": Mock(), "prefill": Mock()}


@pytest.mark.parametrize(
    ("answer", "results", "want"),
    [
        (True, {}, ["decode"]),  # decode not executed yet
        (True, {"decode": None}, []),  # decode failed
        (True, {"decode": target("1:1"), "prefill": target("2:2")}, []),  # all executed
        (True, {"decode": target("1:1")}, ["prefill"]),
        (False, {"decode": target("1:1")}, []),
    ],
)
def test_pd_pick(answer: bool, results: dict[str, Any], want: list[str]) -> None:
    handler = PdProfileHandler("h", Fixed(answer))
    assert sorted(handler.pick_profiles(CycleState(), REQ, PD, results)) == want  # type: ignore[arg-type]


def test_pd_process_results() -> None:
    handler = PdProfileHandler("h", Fixed(True))
    with pytest.raises(NoEndpointError, match="decode workers"):
        handler.process_results(CycleState(), REQ, {"decode": None})
    only = handler.process_results(CycleState(), REQ, {"decode": target("10.0.0.1:8000")})
    assert only.addresses == ("10.0.0.1:8000",) and only.headers == {}
    both = handler.process_results(
        CycleState(), REQ, {"decode": target("10.0.0.1:8000"), "prefill": target("10.0.0.2:8000")}
    )
    # as in llm-d, the prefiller header is a headers handler's job, not this handler's
    assert set(both.profile_results) == {"decode", "prefill"} and both.headers == {}
    dp = PdProfileHandler("h", Fixed(True), PdParams(primary_port=9000))
    result = dp.process_results(CycleState(), REQ, {"decode": target("10.0.0.1:8000")})
    assert result.addresses == ("10.0.0.1:9000",)
    assert result.headers == {DATA_PARALLEL_HEADER: "10.0.0.1:8000"}


# -- disagg-headers-handler / prefill-header-handler -----------------------------------------------------


def result_of(results: Mapping[str, ProfileResult]) -> SchedulingResult:
    primary = results["decode"]
    return SchedulingResult("decode", tuple(t.endpoint for t in primary.targets), results)


@pytest.mark.parametrize(
    ("results", "want"),
    [
        ({"decode": target("1.1.1.1:80")}, {}),
        ({"decode": target("1.1.1.1:80"), "prefill": target()}, {}),  # no prefill target
        ({"decode": target("1.1.1.1:80"), "prefill": target("2.2.2.2:80")}, {PREFILLER_HEADER: "2.2.2.2:80"}),
        (
            {"decode": target("1.1.1.1:80"), "encode": target("3.3.3.3:80", "4.4.4.4:80")},
            {ENCODER_HEADER: "3.3.3.3:80,4.4.4.4:80"},
        ),
        (
            {
                "decode": target("1.1.1.1:80"),
                "prefill": target("2.2.2.2:80"),
                "encode": target("[fd00::1]:80"),
            },
            {PREFILLER_HEADER: "2.2.2.2:80", ENCODER_HEADER: "[fd00::1]:80"},
        ),
    ],
)
def test_headers_handler(results: dict[str, ProfileResult], want: dict[str, str]) -> None:
    for handler in (DisaggHeadersHandler("h"), PrefillHeaderHandler("h")):
        assert handler.request_headers(CycleState(), REQ, result_of(results)) == want


def test_headers_handler_custom_profiles_and_factories() -> None:
    handler = disagg_headers.factory("h", {"prefillProfile": "p", "encodeProfile": "e"}, PluginHandle())
    assert isinstance(handler, DisaggHeadersHandler) and handler.params == HeadersParams("p", "e")
    results = {"decode": target("1:1"), "p": target("2:2"), "prefill": target("9:9")}
    assert handler.request_headers(CycleState(), REQ, result_of(results)) == {PREFILLER_HEADER: "2:2"}
    alias = disagg_headers.prefill_factory("x", {}, PluginHandle())
    assert alias.plugin_type == "prefill-header-handler"
    with pytest.raises(ConfigError, match=r"parameters\.decodeProfile"):
        disagg_headers.factory("h", {"decodeProfile": "d"}, PluginHandle())


LEGACY_PD = """
plugins:
- type: decode-filter
- type: prefill-filter
- type: pd-profile-handler
  parameters: {deciderPluginName: always-disagg-pd-decider}
- type: prefill-header-handler
- type: always-disagg-pd-decider
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}]
- name: decode
  plugins: [{pluginRef: decode-filter}]
"""


def test_legacy_pd_config_sets_prefiller_header_through_the_headers_handler() -> None:
    from scheduler.plugins.filters.roles import ROLE_LABEL
    from scheduler.scheduler import Scheduler

    resolved = load_config_text(HEAD + LEGACY_PD)
    plugins = [r.plugin for r in resolved.plugins]
    scheduler = Scheduler(resolved.profiles, resolved.handler, plugins)
    pool = [
        Endpoint("10.0.0.1:8000", labels={ROLE_LABEL: "decode"}),
        Endpoint("10.0.0.2:8000", labels={ROLE_LABEL: "prefill"}),
    ]
    result = scheduler.schedule(REQ, pool)
    assert result.addresses == ("10.0.0.1:8000",)
    assert result.headers == {PREFILLER_HEADER: "10.0.0.2:8000"}
    without = load_config_text(HEAD + LEGACY_PD.replace("- type: prefill-header-handler\n", ""))
    bare = Scheduler(without.profiles, without.handler, [r.plugin for r in without.plugins]).schedule(
        REQ, pool
    )
    assert bare.headers == {} and set(bare.profile_results) == {"decode", "prefill"}


# -- data-parallel-profile-handler -----------------------------------------------------------------------


def test_data_parallel_rewrites_port_and_sets_header() -> None:
    handler = data_parallel.factory("dp", {}, PluginHandle())
    assert isinstance(handler, DataParallelProfileHandler) and handler.primary_port == 8000
    profiles = {"default": Mock()}
    assert list(handler.pick_profiles(CycleState(), REQ, profiles, {})) == ["default"]  # type: ignore[arg-type]
    result = handler.process_results(CycleState(), REQ, {"default": target("10.0.0.7:8003", "10.0.0.8:8001")})
    assert result.addresses == ("10.0.0.7:8000", "10.0.0.8:8000")
    assert result.headers == {DATA_PARALLEL_HEADER: "10.0.0.7:8003"}
    with pytest.raises(NoEndpointError):
        handler.process_results(CycleState(), REQ, {"default": None})


@pytest.mark.parametrize("port", [0, 65536, -1, "8000", 80.5])
def test_data_parallel_bad_port(port: Any) -> None:
    with pytest.raises(ConfigError, match=r"parameters\.primaryPort"):
        data_parallel.factory("dp", {"primaryPort": port}, PluginHandle())


DP_CONFIG = """
plugins:
- type: prefix-cache-scorer
- type: decode-filter
- type: max-score-picker
- type: data-parallel-profile-handler
  parameters:
    primaryPort: 8000
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
"""


def test_upstream_dp_config_loads_and_two_profiles_are_rejected() -> None:
    resolved = load_config_text(HEAD + DP_CONFIG)
    assert isinstance(resolved.handler, DataParallelProfileHandler)
    two = DP_CONFIG + "- name: other\n  plugins:\n  - pluginRef: decode-filter\n"
    with pytest.raises(ConfigError, match="routes exactly one profile"):
        load_config_text(HEAD + two)


# -- header-profile-handler ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "header", "default"),
    [
        ({}, "epp-profile", "decode"),
        ({"headerName": "x-profile"}, "x-profile", "decode"),
        ({"headerName": "  X-Custom-Profile  "}, "x-custom-profile", "decode"),
        ({"headerName": "   "}, "epp-profile", "decode"),
        ({"defaultProfile": "prefill"}, "epp-profile", "prefill"),
        ({"defaultProfile": "   "}, "epp-profile", "decode"),
    ],
)
def test_header_profile_factory(params: dict[str, str], header: str, default: str) -> None:
    handler = header_profile.factory("h", params, PluginHandle())
    assert isinstance(handler, HeaderProfileHandler)
    assert (handler.header, handler.default) == (header, default)


EPD = {"encode": Mock(), "prefill": Mock(), "decode": Mock()}


def with_headers(**headers: str) -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model="m", headers=headers)


@pytest.mark.parametrize(
    ("profiles", "headers", "results", "want"),
    [
        (EPD, {"epp-profile": "encode"}, {}, ["encode"]),
        (EPD, {"epp-profile": "encode"}, {"encode": target("1:1")}, []),  # already ran
        (EPD, {}, {}, ["decode"]),  # missing header -> default
        (EPD, {"epp-profile": "unknown"}, {}, []),
        (EPD, {"epp-profile": "  encode  "}, {}, ["encode"]),
        (EPD, {"epp-profile": "   "}, {}, ["decode"]),
        (EPD, {"epp-profile": "Encode"}, {}, []),  # case-sensitive value
        ({"decode": Mock()}, {}, {}, ["decode"]),  # single profile, no header
        ({"decode": Mock()}, {"epp-profile": "unknown"}, {}, ["decode"]),
        ({"decode": Mock(), "shadow": Mock(shadow=True)}, {"epp-profile": "x"}, {}, ["decode", "shadow"]),
    ],
)
def test_header_profile_pick(
    profiles: dict[str, Any], headers: dict[str, str], results: dict[str, Any], want: list[str]
) -> None:
    handler = HeaderProfileHandler("h")
    assert sorted(handler.pick_profiles(CycleState(), with_headers(**headers), profiles, results)) == want


def test_header_profile_process_results() -> None:
    handler = HeaderProfileHandler("h")
    result = handler.process_results(CycleState(), with_headers(), {"prefill": target("1:1")})
    assert result.primary_profile == "prefill" and result.addresses == ("1:1",)
    with pytest.raises(NoEndpointError, match='missing "epp-profile" header'):
        HeaderProfileHandler("h", HeaderProfileParams(default_profile="prefill")).process_results(
            CycleState(), with_headers(), {}
        )
    with pytest.raises(
        NoEndpointError, match='no scheduling profile configured for "epp-profile" header value "x"'
    ):
        handler.process_results(CycleState(), with_headers(**{"epp-profile": "x"}), {})
    with pytest.raises(NoEndpointError, match='profile "decode" found no endpoint'):
        handler.process_results(CycleState(), with_headers(), {"decode": None})


def test_scheduler_reports_the_request_headers_its_plugins_own() -> None:
    from scheduler.scheduler import Scheduler

    resolved = load_config_text(HEAD + LEGACY_PD)
    scheduler = Scheduler(resolved.profiles, resolved.handler, [r.plugin for r in resolved.plugins])
    assert scheduler.owned_request_headers == {PREFILLER_HEADER, ENCODER_HEADER}  # prefill-header-handler
    bare = load_config_text(HEAD + LEGACY_PD.replace("- type: prefill-header-handler\n", ""))
    assert (
        Scheduler(bare.profiles, bare.handler, [r.plugin for r in bare.plugins]).owned_request_headers
        == set()
    )


DISAGG = """
plugins:
- type: prefix-based-pd-decider
  parameters: {nonCachedTokens: 256}
- type: disagg-profile-handler
  parameters: {deciders: {prefill: prefix-based-pd-decider}}
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: max-score-picker}]
"""


def test_disagg_profile_handler_consumes_the_default_prefix_producer() -> None:
    """llm-d-router's disagg Handler consumes PrefixCacheMatchInfo: under llm-d.ai the producer is
    added when absent and its match is what the prefill decider judges; legacy: the published match."""
    from scheduler.plugins.handlers.disagg import DisaggProfileHandler
    from scheduler.plugins.prefix.match import PREFIX_MATCH, PrefixMatch

    handler = load_config_text(ROUTER_HEAD + DISAGG).handler
    assert isinstance(handler, DisaggProfileHandler)
    producer = handler.producer
    assert producer is not None and producer.name == "approx-prefix-cache-producer"
    legacy = load_config_text(HEAD + DISAGG).handler
    assert isinstance(legacy, DisaggProfileHandler) and legacy.producer is None

    def held(blocks: int) -> PrefixMatch:  # 64 blocks of 16 tokens: the whole prompt
        return PrefixMatch(tuple(range(64)), {"10.0.0.1:8000": blocks}, 16, "p")

    request = LLMRequest(request_id="r", model="m", target_model="m", token_estimate=1024)
    profiles = {"decode": Mock(), "prefill": Mock()}
    for cached, want in ((64, []), (0, ["prefill"])):
        producer.match = lambda cycle, request, blocks=cached: held(blocks)  # type: ignore[method-assign]
        cycle = CycleState()
        cycle.write(PREFIX_MATCH, held(64 - cached))  # the published match says the opposite
        picked = handler.pick_profiles(cycle, request, profiles, {"decode": target("10.0.0.1:8000")})  # type: ignore[arg-type]
        assert sorted(picked) == want
