"""session-affinity-filter (llm-d's test tables: encoded_endpoint_header and session_id)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from plugin_builders import FakeClock

from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins import session
from scheduler.plugins.filters import session_affinity
from scheduler.plugins.filters.session_affinity import SessionAffinityFilter
from scheduler.plugins.handlers.single_profile import SingleProfileHandler
from scheduler.plugins.pickers.common import PickerParams
from scheduler.plugins.pickers.max_score import MaxScorePicker
from scheduler.plugins.scorers.session_affinity import SessionAffinityScorer, encode_token
from scheduler.plugins.session import MAX_SESSIONS
from scheduler.profile import SchedulerProfile
from scheduler.scheduler import Scheduler
from scheduler.types import Endpoint, LLMRequest, ProfileResult, SchedulingResult, ScoredEndpoint

A = Endpoint("10.0.0.1:8000", name="pod-a")
B = Endpoint("10.0.0.2:8000", name="pod-b")
POOL = [A, B]


def req(**headers: str) -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model="m", headers=headers)


def build(params: dict[str, Any], clock: Any = None) -> SessionAffinityFilter:
    handle = PluginHandle(clock=clock) if clock is not None else PluginHandle()
    plugin = session_affinity.factory("f", params, handle)
    assert isinstance(plugin, SessionAffinityFilter)
    return plugin


@pytest.mark.parametrize(
    ("params", "headers", "want"),
    [
        ({}, {"x-session-token": encode_token(B.address)}, [B]),
        ({"encodedEndpointHeaderConfig": {"header": "X-Custom"}}, {"x-custom": encode_token(B.address)}, [B]),
        ({"headerName": "x-custom"}, {"x-custom": encode_token(B.address)}, [B]),  # older llm-d name
        (
            {"encodedEndpointHeaderConfig": {"header": "x-custom"}},
            {"x-session-token": encode_token(B.address)},
            POOL,
        ),
        ({}, {}, POOL),  # no session token
        ({}, {"x-session-token": "!!not base64!!"}, POOL),
        ({}, {"x-session-token": encode_token("10.9.9.9:8000")}, POOL),  # session pod not a candidate
    ],
)
def test_encoded_endpoint_header_filter(
    params: dict[str, Any], headers: dict[str, str], want: list[Endpoint]
) -> None:
    assert list(build(params).filter(CycleState(), req(**headers), POOL)) == want
    assert list(build(params).filter(CycleState(), req(**headers), [])) == []


def result(primary: Endpoint, **profiles: ProfileResult) -> SchedulingResult:
    routed = {"decode": ProfileResult("decode", (ScoredEndpoint(primary, 1.0),)), **profiles}
    return SchedulingResult("decode", (primary,), routed)


def test_encoded_response_header() -> None:
    plugin = build({})
    assert plugin.response_headers(req(), result(A), None) == {"x-session-token": encode_token(A.address)}
    assert plugin.response_headers(req(), result(A), B.address) == {
        "x-session-token": encode_token(B.address)
    }
    custom = build({"encodedEndpointHeaderConfig": {"header": "x-custom-session"}})
    assert custom.response_headers(req(), result(A), None) == {"x-custom-session": encode_token(A.address)}
    prefill = build(
        {"profileName": "prefill", "encodedEndpointHeaderConfig": {"header": "x-session-token-prefill"}}
    )
    pd = result(A, prefill=ProfileResult("prefill", (ScoredEndpoint(B, 1.0),)))
    assert prefill.response_headers(req(), pd, None) == {"x-session-token-prefill": encode_token(B.address)}
    assert prefill.response_headers(req(), result(A), None) == {}  # decode-only
    empty = result(A, prefill=ProfileResult("prefill", ()))
    assert prefill.response_headers(req(), empty, None) == {}


@pytest.mark.parametrize(
    ("params", "ok"),
    [
        ({}, True),
        ({"strategy": "encoded_endpoint_header"}, True),
        ({"strategy": "session_id"}, True),
        ({"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "x-session-id"}]}}, True),
        ({"strategy": "session_id", "sessionIdConfig": {"sources": []}}, True),
        ({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": 0}}, True),
        ({"strategy": "bogus"}, False),
        (
            {"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "h", "attribute": "a"}]}},
            False,
        ),
        (
            {"strategy": "session_id", "sessionIdConfig": {"sources": [{"attribute": "agent-identity"}]}},
            True,
        ),
        (
            {"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "h", "producer": "p"}]}},
            False,
        ),
        ({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": -1}}, False),
        ({"strategy": "session_id", "sessionIdConfig": {"evictionSweepSeconds": -1}}, False),
        ({"headerName": "a", "encodedEndpointHeaderConfig": {"header": "b"}}, False),
        ({"sessionIdConfig": {}}, False),  # only with session_id
        ({"strategy": "session_id", "headerName": "a"}, False),
        ({"encodedEndpointHeaderConfig": {"heder": "b"}}, False),
    ],
)
def test_factory_validation(params: dict[str, Any], ok: bool) -> None:
    if ok:
        build(params)
    else:
        with pytest.raises(ConfigError, match=r'\(session-affinity-filter "f"\): parameters'):
            build(params)


def test_session_id_binds_on_dispatch_and_pins() -> None:
    clock = FakeClock()
    plugin = build({"strategy": "session_id"}, clock)
    r = req(**{"x-session-id": "s1"})
    assert list(plugin.filter(CycleState(), r, POOL)) == POOL  # unbound: no preference
    plugin.on_dispatched(r, result(B))
    assert list(plugin.filter(CycleState(), r, POOL)) == [B]
    assert list(plugin.filter(CycleState(), req(**{"x-session-id": "other"}), POOL)) == POOL
    assert list(plugin.filter(CycleState(), r, [A])) == [A]  # bound pod gone: pass through
    plugin.on_dispatched(r, result(A))  # ... and rebind where the request went
    assert list(plugin.filter(CycleState(), r, POOL)) == [A]
    assert plugin.response_headers(r, result(A), None) == {}  # nothing written to the client


def test_session_id_sources_in_priority_order_and_ttl() -> None:
    clock = FakeClock()
    plugin = build(
        {
            "strategy": "session_id",
            "sessionIdConfig": {
                "sources": [{"header": "X-First"}, {"header": "x-second"}],
                "evictionTtlSeconds": 5,
                "evictionSweepSeconds": 1,
            },
        },
        clock,
    )
    plugin.on_dispatched(req(**{"x-second": "s"}), result(B))
    assert list(plugin.filter(CycleState(), req(**{"x-first": "  ", "x-second": "s"}), POOL)) == [B]
    assert list(plugin.filter(CycleState(), req(**{"x-first": "s"}), POOL)) == [B]
    clock.now = 10.0
    plugin.on_dispatched(req(**{"x-first": "t"}), result(A))  # sweeps the expired binding of "s"
    assert list(plugin.filter(CycleState(), req(**{"x-second": "s"}), POOL)) == POOL
    assert list(plugin.filter(CycleState(), req(**{"x-first": "t"}), POOL)) == [A]


def test_session_id_bindings_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "MAX_SESSIONS", 2)
    plugin = build({"strategy": "session_id"}, FakeClock())
    for s in ("a", "b", "c"):
        plugin.on_dispatched(req(**{"x-session-id": s}), result(B))
    assert list(plugin.filter(CycleState(), req(**{"x-session-id": "a"}), POOL)) == POOL
    assert list(plugin.filter(CycleState(), req(**{"x-session-id": "c"}), POOL)) == [B]
    assert MAX_SESSIONS == 100_000


def test_scheduler_gathers_client_response_headers() -> None:
    flt = build({})
    scorer = SessionAffinityScorer("s")
    picker = MaxScorePicker("p", PickerParams(), random.Random(0))
    profile = SchedulerProfile("default", [flt], [(scorer, 1.0)], picker)
    scheduler = Scheduler({"default": profile}, SingleProfileHandler("h"), [flt, scorer])
    assert scheduler.has_response_header_providers
    r = req(**{"x-session-token": encode_token(B.address)})
    res = scheduler.schedule(r, POOL)
    assert res.addresses == (B.address,)
    assert scheduler.added_response_headers(r, res, None) == {"x-session-token": encode_token(B.address)}


def decided(primary: Endpoint, candidates: tuple[str, ...]) -> SchedulingResult:
    """A result whose decision record says which endpoints reached scoring in the decode profile."""
    from scheduler.types import DecisionRecord, ProfileDecision

    decision = ProfileDecision(
        "decode", (), candidates, {}, {}, (0.0,) * len(candidates), "p", (primary.address,)
    )
    plain = result(primary)
    return SchedulingResult(
        "decode", plain.endpoints, plain.profile_results, decision=DecisionRecord("r", (decision,), "decode")
    )


def test_session_id_keeps_binding_when_bound_endpoint_was_a_candidate() -> None:
    plugin = build({"strategy": "session_id"}, FakeClock())
    r = req(**{"x-session-id": "s"})
    plugin.on_dispatched(r, decided(A, (A.address, B.address)))
    plugin.on_dispatched(r, decided(B, (A.address, B.address)))  # A was there but lost: keep A
    assert list(plugin.filter(CycleState(), r, POOL)) == [A]
    plugin.on_dispatched(r, decided(B, (B.address,)))  # A was not a candidate: move to B
    assert list(plugin.filter(CycleState(), r, POOL)) == [B]


@pytest.mark.parametrize(
    ("params", "headers", "want"),
    [
        ({}, {"x-session-token": encode_token(B.address)}, [0.0, 1.0]),
        ({"headerName": "X-Custom"}, {"x-custom": encode_token(B.address)}, [0.0, 1.0]),
        (
            {"encodedEndpointHeaderConfig": {"header": "x-custom"}},
            {"x-custom": encode_token(A.address)},
            [1.0, 0.0],
        ),
        ({"strategy": "encoded_endpoint_header", "algorithm": "encoded_endpoint_header"}, {}, [0.0, 0.0]),
        ({"strategy": "session_id"}, {"x-session-id": "unbound"}, [0.0, 0.0]),
    ],
)
def test_scorer_strategies(params: dict[str, Any], headers: dict[str, str], want: list[float]) -> None:
    from scheduler.plugins.scorers import session_affinity as scorer_module

    scorer = scorer_module.factory("s", params, PluginHandle(clock=FakeClock()))
    assert scorer.score(CycleState(), req(**headers), POOL) == want  # type: ignore[attr-defined]


def test_scorer_session_id_binds_and_prefers() -> None:
    from scheduler.plugins.scorers import session_affinity as scorer_module

    scorer = scorer_module.factory("s", {"strategy": "session_id"}, PluginHandle(clock=FakeClock()))
    r = req(**{"x-session-id": "s"})
    scorer.on_dispatched(r, result(B))  # type: ignore[attr-defined]
    assert scorer.score(CycleState(), r, POOL) == [0.0, 1.0]  # type: ignore[attr-defined]
    assert scorer.response_headers(r, result(B), None) == {}  # type: ignore[attr-defined]


def test_multicluster_variant_is_the_same_filter() -> None:
    plugin = session_affinity.multicluster_factory("m", {}, PluginHandle())
    assert plugin.plugin_type == "multicluster-session-affinity-filter"
    r = req(**{"x-session-token": encode_token(B.address)})
    assert list(plugin.filter(CycleState(), r, POOL)) == [B]  # type: ignore[attr-defined]
