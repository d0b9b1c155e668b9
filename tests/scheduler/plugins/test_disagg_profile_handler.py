import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError, NoEndpointError
from scheduler.handle import PluginHandle
from scheduler.observer import LoggingObserver
from scheduler.plugins.filters.roles import ROLE_LABEL, DecodeFilter, PrefillFilter
from scheduler.plugins.handlers import disagg, disagg_deciders
from scheduler.plugins.handlers.disagg import DATA_PARALLEL_HEADER, PREFILLER_HEADER, DisaggProfileHandler
from scheduler.plugins.handlers.disagg_deciders import AlwaysDisaggDecider
from scheduler.plugins.handlers.disagg_params import DisaggParams
from scheduler.plugins.pickers.common import PickerParams
from scheduler.plugins.pickers.max_score import MaxScorePicker
from scheduler.plugins.scorers.running_requests import RunningRequestsSizeScorer
from scheduler.profile import SchedulerProfile
from scheduler.types import Endpoint, EndpointView, LLMRequest, Metrics, ProfileResult, SchedulingResult

REQ = LLMRequest(request_id="r", model="m", target_model="m", prompt_text="x" * 400, token_estimate=100)
D1 = Endpoint("10.0.0.1:8000", labels={ROLE_LABEL: "decode"}, metrics=Metrics(running_requests=5))
D2 = Endpoint("10.0.0.2:8000", labels={ROLE_LABEL: "decode"}, metrics=Metrics(running_requests=1))
P1 = Endpoint("10.0.1.1:8000", labels={ROLE_LABEL: "prefill"})
POOL = [D1, D2, P1]


class Never:
    plugin_type = "never-decider"
    name = "never"

    def should_disaggregate(self, cycle: CycleState, request: LLMRequest, decode: EndpointView) -> bool:
        return False


def profile(name: str, filter_: Any, shadow: bool = False) -> SchedulerProfile:
    picker = MaxScorePicker("p", PickerParams(), random.Random(0))
    return SchedulerProfile(name, [filter_], [(RunningRequestsSizeScorer("s"), 1.0)], picker, shadow=shadow)


PROFILES = {"decode": profile("decode", DecodeFilter("d")), "prefill": profile("prefill", PrefillFilter("p"))}


def schedule(
    handler: DisaggProfileHandler,
    profiles: Mapping[str, SchedulerProfile],
    pool: Sequence[EndpointView] = POOL,
) -> tuple[SchedulingResult, list[str]]:
    """What the scheduler does: loop pick_profiles / run until empty, then process the routed results."""
    cycle = CycleState()
    results: dict[str, ProfileResult | None] = {}
    order: list[str] = []
    while batch := handler.pick_profiles(cycle, REQ, profiles, results):
        for name, p in batch.items():
            order.append(name)
            results[name] = p.run(cycle, REQ, pool, LoggingObserver())[0]
    routed = {n: r for n, r in results.items() if not profiles[n].shadow}
    return handler.process_results(cycle, REQ, routed), order


def test_disaggregates_with_prefiller_header() -> None:
    result, order = schedule(DisaggProfileHandler("h", AlwaysDisaggDecider("a")), PROFILES)
    assert order == ["decode", "prefill"]
    assert result.primary_profile == "decode"
    assert result.addresses == (D2.address,)
    assert result.headers == {PREFILLER_HEADER: P1.address}
    assert set(result.profile_results) == {"decode", "prefill"}


def test_decider_says_no() -> None:
    result, order = schedule(DisaggProfileHandler("h", Never()), PROFILES)  # type: ignore[arg-type]
    assert order == ["decode"] and result.headers == {} and result.addresses == (D2.address,)


def test_no_prefill_profile_is_decode_only() -> None:
    result, order = schedule(
        DisaggProfileHandler("h", AlwaysDisaggDecider("a")), {"decode": PROFILES["decode"]}
    )
    assert order == ["decode"] and result.headers == {}


def test_failed_prefill_falls_back_to_decode_only() -> None:
    result, order = schedule(DisaggProfileHandler("h", AlwaysDisaggDecider("a")), PROFILES, [D1, D2])
    assert (
        order == ["decode", "prefill"] and result.headers == {} and set(result.profile_results) == {"decode"}
    )


def test_failed_decode_raises() -> None:
    handler = DisaggProfileHandler("h", AlwaysDisaggDecider("a"))
    with pytest.raises(NoEndpointError, match='decode profile "decode" found no endpoint'):
        schedule(handler, PROFILES, [P1])
    with pytest.raises(NoEndpointError, match="not configured"):
        schedule(handler, {"prefill": PROFILES["prefill"]})


def test_shadow_profiles_run_first_and_are_not_routed() -> None:
    profiles = {**PROFILES, "shadow": profile("shadow", DecodeFilter("d"), shadow=True)}
    result, order = schedule(DisaggProfileHandler("h", AlwaysDisaggDecider("a")), profiles)
    assert sorted(order[:2]) == ["decode", "shadow"] and order[2] == "prefill"
    assert "shadow" not in result.profile_results


def test_custom_profile_names_and_primary_port() -> None:
    profiles = {"d": PROFILES["decode"], "p": PROFILES["prefill"]}
    params = DisaggParams(decode_profile="d", prefill_profile="p", primary_port=9000)
    result, _ = schedule(DisaggProfileHandler("h", AlwaysDisaggDecider("a"), params), profiles)
    assert result.primary_profile == "d"
    assert result.addresses == ("10.0.0.2:9000",)
    assert result.headers == {DATA_PARALLEL_HEADER: D2.address, PREFILLER_HEADER: P1.address}


def test_factory_resolves_decider() -> None:
    handle = PluginHandle()
    handle.add(disagg_deciders.always_factory("always", {}, handle))
    for key in ("prefillDeciderPluginName", "deciderPluginName"):
        handler = disagg.factory("h", {key: "always"}, handle)
        assert isinstance(handler, DisaggProfileHandler) and handler.decider.name == "always"
    nested = disagg.factory(
        "h", {"profiles": {"decode": "d", "prefill": "p"}, "deciders": {"prefill": "always"}}, handle
    )
    assert (
        isinstance(nested, DisaggProfileHandler)
        and nested.decider is not None
        and nested.decider.name == "always"
    )
    assert (nested.params.decode, nested.params.prefill) == ("d", "p")  # type: ignore[attr-defined]
    default = disagg.factory("h", {}, handle)
    assert isinstance(default, DisaggProfileHandler) and default.decider is None


def test_without_decider_prefill_never_runs() -> None:
    result, order = schedule(DisaggProfileHandler("h", None), PROFILES)
    assert order == ["decode"] and result.headers == {}


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"prefillDeciderPluginName": "missing"},
            r"parameters\.prefillDeciderPluginName: no plugin named 'missing'",
        ),
        ({"deciderPluginName": "scorer"}, "is not a decider"),
        ({"decodeProfile": "x", "prefillProfile": "x"}, "must differ"),
        ({"profiles": {"decode": "x", "prefill": "x"}}, "must differ"),
        ({"profiles": {"decode": "x", "encode": "x"}}, "must differ"),
        ({"primaryPort": 70000}, r"parameters\.primaryPort"),
        ({"deciders": {"encode": "missing"}}, r"parameters\.deciders\.encode: no plugin named 'missing'"),
        ({"encodeDeciderPluginName": "scorer"}, r"parameters\.encodeDeciderPluginName: .*is not a decider"),
        ({"stageOrder": "sideways"}, r"parameters\.stageOrder"),
        ({"stageOrder": "prefill-first", "deciders": {"prefill": "scorer"}}, "not supported with stageOrder"),
        ({"stageOrder": "prefill-first", "deciderPluginName": "scorer"}, "not supported with stageOrder"),
        (
            {"stageOrder": "prefill-first", "prefillDeciderPluginName": "scorer"},
            "not supported with stageOrder",
        ),
        ({"encodeProfile": "e", "deciders": {"encode": "scorer"}}, "cannot mix"),
        ({"profiles": {"prefil": "p"}}, r"profiles\.prefil: unknown key"),
        ({"profiles": ["decode"]}, "profiles: expected a mapping"),
        ({"deciders": {"prefill": ""}}, "expected a non-empty name"),
        ({"profiles": {"decode": "d"}, "prefillDeciderPluginName": "a"}, "cannot mix"),
        ({"deciders": {"prefill": "missing"}}, r"parameters\.deciders\.prefill: no plugin named 'missing'"),
        ({"foo": 1}, "unknown parameter"),
    ],
)
def test_factory_errors(parameters: dict[str, Any], message: str) -> None:
    handle = PluginHandle()
    handle.add(RunningRequestsSizeScorer("scorer"))
    with pytest.raises(ConfigError, match=message):
        disagg.factory("h", parameters, handle)
